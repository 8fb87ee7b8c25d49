"""Trace the user's step into an OpGraph: concrete function -> inlined GraphDef -> networkx graph.

Also binds the graph's placeholders to what feeds them at run time (the user's flattened arguments and the
captured values, variable handles among them), and keys captured variables by a name stable across processes.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
import sys
import sysconfig
from pathlib import Path
from typing import Any

from .. import tfcompat
from ..errors import TargetError
from ..ir import optypes
from ..ir.graph import OPAQUE_STATE, OpGraph
from ..ir.ids import op_id
from ..targets.loader import Target
from ..targets.user_errors import error_summary, user_traceback
from .inline import Origin, inline_calls

_LIBRARY_DIRS = tuple(os.sep + d + os.sep for d in ("tensorflow", "keras", "site-packages", "dist-packages",
                                                     "tf_keras", "absl"))
_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent) + os.sep  # opbisect's own code
# Python's own library is a library too: under tf.distribute a replica's step runs in a thread, whose outermost
# frame is threading.py's, never the user's.
_STDLIB_DIRS = tuple({str(p) + os.sep for k in ("stdlib", "platstdlib")
                      for p in (Path(sysconfig.get_paths()[k]), Path(sysconfig.get_paths()[k]).resolve())})


@dataclasses.dataclass
class Region:
    """A loop or branch body that trace entered: what capture needs to rebuild its function with taps."""

    id: str  # e.g. "while/body", "while/body::while/cond/then_branch"
    op: str  # the loop or branch op's name in its parent's GraphDef
    op_type: str
    suffix: str  # the body attribute: then_branch, else_branch, branch<k>, body
    function: str  # the body's function name
    graph_def: Any  # the body's flat (inlined) GraphDef, local names
    arg_names: list[str]  # its argument placeholders, in order
    output_names: list[str]  # its result tensors, local names
    arg_specs: list[tuple]  # (dtype, shape) of each argument
    parent: str  # the region holding the op ("" for the step's top level)
    cond: Any = None  # a loop's condition FuncGraph (capture gives it the extra loop variables)


@dataclasses.dataclass
class Trace:
    graph: OpGraph
    graph_def: Any  # the flat (inlined) GraphDef the instrumented step imports
    concrete: Any  # the user's ConcreteFunction: the uninstrumented step
    arg_names: list[str]  # placeholder op names fed by the user's flattened arguments, in order
    capture_names: list[str]  # placeholder op names fed by captured values, in order
    output_names: list[str]  # tensor names of the step's flat outputs
    variables: dict[str, Any]  # variable key -> tf.Variable, every variable the step captures
    jit_compile: bool | None
    regions: dict[str, "Region"] = dataclasses.field(default_factory=dict)  # entered bodies, parents first
    mirrors: list[list[str]] = dataclasses.field(default_factory=list)  # keys of each mirrored variable's copies
    tappable: dict = dataclasses.field(default_factory=dict, repr=False)  # capture's cache, per scope
    tap_every: bool = False  # capture taps element-wise outputs too (capture.builder.tappable_tensors)
    flattens_plainly: set = dataclasses.field(default_factory=set, repr=False)  # flat_args' checked layouts

    def arg_specs(self) -> list:
        """The specs the step's flat arguments were traced for (a dimension may be None)."""
        import tensorflow as tf

        graph = self.concrete.graph
        return [tf.TensorSpec(graph.get_operation_by_name(n).outputs[0].shape,
                              graph.get_operation_by_name(n).outputs[0].dtype) for n in self.arg_names]

    def flat_args(self, args: tuple) -> list:
        """The user's arguments flattened the way the concrete function feeds its placeholders.

        TensorFlow's own binding takes 40-80 us a call, a few percent of a 1-2 ms GPU step, paid on every run of
        the patched and the instrumented step (and again inside the call). Arguments nested in tuples, lists and
        dicts of tensors are flattened by tf.nest in microseconds once their layout has given, on its first
        call, exactly the tensors TensorFlow's binding gives."""
        import tensorflow as tf

        layout = tensor_layout(args)
        if layout is not None and layout in self.flattens_plainly:
            return tf.nest.flatten(args)
        flat = tfcompat.flat_call_args(self.concrete, args)
        if layout is not None:
            plain = tf.nest.flatten(args)
            if len(flat) == len(plain) and all(a is b for a, b in zip(flat, plain)):
                self.flattens_plainly.add(layout)
        return flat


def tensor_layout(value):
    """A hashable description of nested tuples, lists and dicts of tensors (their types, keys and lengths), or
    None where anything else is inside."""
    import tensorflow as tf

    if isinstance(value, tf.Tensor):
        return "T"
    if isinstance(value, (tuple, list)):
        inner = tuple(tensor_layout(v) for v in value)
        return None if None in inner else (type(value).__name__, inner)
    if isinstance(value, dict):
        try:
            keys = sorted(value)
        except TypeError:
            return None
        inner = tuple(tensor_layout(value[k]) for k in keys)
        return None if None in inner else ("dict", tuple(keys), inner)
    return None


def _site(origin: Origin | None, seen: dict) -> tuple[str, str]:
    """(user site, library site) of an op: the innermost frame in the user's code, and the innermost frame
    outside TensorFlow. Either is "" when the op's traceback has none (the Keras form's ops are created in
    Keras, from opbisect: the op's name scope then names the layer). `seen`: the sites of each stack already
    read. TensorFlow converts every frame it is asked for (about 4 us each), while a step's ops come from few
    distinct stacks (39 for 27k ops in a deep MLP), which hash and compare by their frames."""
    if origin is None:
        return "", ""
    try:
        frames = origin.graph.get_operation_by_name(origin.name).traceback
    except (KeyError, ValueError, AttributeError):
        return "", ""
    if frames is None:  # an op imported from a GraphDef (a patched step traced again) has no creation frames
        return "", ""
    try:
        return seen[frames]
    except KeyError:
        sites = seen[frames] = pick_sites(frames, entry=sys.argv[0] if sys.argv else "")
        return sites
    except TypeError:  # a stack this TensorFlow cannot hash
        return pick_sites(frames, entry=sys.argv[0] if sys.argv else "")


@functools.lru_cache(maxsize=4096)  # an op's traceback has dozens of frames from a few files: resolve each once
def _ours(filename: str, console_script: str | None) -> bool:
    """opbisect's own code: its package, or the console script that runs it (however the path was spelled)."""
    path = str(Path(filename).resolve())
    return path.startswith(_PACKAGE_DIR) or path == console_script


@functools.lru_cache(maxsize=8)
def _console_script(entry: str) -> str | None:
    """The program that runs, resolved, when it is opbisect's console script (its frames are then opbisect's)."""
    return str(Path(entry).resolve()) if Path(entry).name.startswith("opbisect") else None


@functools.lru_cache(maxsize=4096)
def _frame_kind(filename: str, console_script: str | None) -> tuple[bool, bool, bool]:
    """(no site at all: generated code or opbisect's own, a library's, TensorFlow's) for a frame's file."""
    skip = filename.startswith("<") or "__autograph_generated" in filename or _ours(filename, console_script)
    library = any(d in filename for d in _LIBRARY_DIRS) or filename.startswith(_STDLIB_DIRS)
    return skip, library, "tensorflow" + os.sep in filename


def pick_sites(frames, entry: str = "") -> tuple[str, str]:
    """(user site, library site) from an op's creation frames, outermost first: the innermost frame in the
    user's code, and the innermost outside TensorFlow. `entry` is the program that runs (sys.argv[0]): when it is
    opbisect's console script, its frames are opbisect's, not the user's. Read from the innermost frame out,
    stopping once both are found (a step of 25k ops has a million frames; each file is classified once)."""
    ours = _console_script(entry)
    user = lib = None
    for f in reversed(frames):
        skip, library, tensorflow = _frame_kind(f.filename, ours)
        if skip:
            continue
        if lib is None and not tensorflow:
            lib = f
        if user is None and not library:
            user = f
        if user is not None and lib is not None:
            break
    return _where(user), _where(lib)


def _where(frame) -> str:
    return f"{os.path.basename(frame.filename)}:{frame.lineno} in {frame.name}" if frame is not None else ""


_NAME_LIKE_ATTRS = {"shared_name", "container", "config_proto", "executor_type"}


def attrs_digest(node) -> str:
    """A digest of an op's attributes that ignores names, devices and function names (they differ between
    processes while the computation does not): for aligning graphs by structure."""
    digest = hashlib.sha1()
    for key in sorted(node.attr):
        value = node.attr[key]
        if key.startswith("_") or key in _NAME_LIKE_ATTRS or value.HasField("func") or value.list.func:
            continue
        digest.update(key.encode())
        digest.update(value.SerializeToString(deterministic=True))
    return digest.hexdigest()[:16]


def variable_keys(variables) -> dict[int, str]:
    """id(variable) -> a key naming it, stable across processes: its name, and where several variables share a
    name (layers nested in a custom layer), `#2`, `#3`... in the order they were created. The order in which the
    step captures them is no key: it can follow Python's hash order, which differs between processes."""
    keys, seen = {}, {}
    for v in sorted(variables, key=lambda v: (v.name, tfcompat.creation_order(v))):
        base = v.name[:-2] if v.name.endswith(":0") else v.name
        n = seen.get(base, 0)
        seen[base] = n + 1
        keys[id(v)] = base if n == 0 else f"{base}#{n + 1}"
    return keys


def handle_source(t):
    """Where a resource handle comes from: through Identity and IdentityN, and through a loop (a While's output k
    is its loop variable k, the handle it was given)."""
    while True:
        op = t.op
        if op.type == "Identity" and op.inputs:
            t = op.inputs[0]
        elif op.type == "IdentityN" or (optypes.has(op.type, optypes.CONTROL_FLOW) and "While" in op.type):
            t = op.inputs[t.value_index]
        else:
            return t


def tf_resource():
    import tensorflow as tf

    return tf.resource


def concrete_function(target: Target, args: tuple):
    try:
        return target.step.get_concrete_function(*(target.signature or args))
    except Exception as exc:
        raise TargetError(f"tracing `{target.path.name}`'s step raised {error_summary(exc)}",
                          user_traceback(exc, target.path)) from None


def _flatten(graph) -> tuple:
    """(`graph`'s GraphDef with every call inlined, each node's Origin, the tf.Graph holding exactly those ops:
    `graph` itself where no call was inlined, else None)."""
    graph_def = graph.as_graph_def()
    flat, origins = inline_calls(graph_def, graph)
    return flat, origins, graph if flat is graph_def else None


def captured_variables(cf) -> tuple[dict[str, Any], dict[str, str]]:
    """The variables a concrete function captures, by key (stable across processes), and the key of each capture's
    placeholder inside it: what the step reads besides its arguments."""
    fg = cf.graph
    captured_vars = {id(v.handle): v for v in tfcompat.per_replica_variables(fg.variables)}
    internal = tfcompat.internal_captures(fg)
    external = list(cf.captured_inputs)
    unwatched = {id(t) for t in external if t.dtype == tf_resource() and id(t) not in captured_vars}
    if unwatched:  # handles the step took as `.handle` (a legacy Keras optimizer's slots): their variables
        captured_vars.update(tfcompat.variables_of_handles(unwatched))
    keys = variable_keys(captured_vars.values())
    var_of_placeholder, variables = {}, {}
    for ext, inn in zip(external, internal):
        v = captured_vars.get(id(ext))
        if v is not None:
            var_of_placeholder[inn.op.name] = keys[id(v)]
            variables[keys[id(v)]] = v
    return variables, var_of_placeholder


def trace_step(target: Target, args: tuple) -> Trace:
    cf = concrete_function(target, args)
    fg = cf.graph
    flat_gd, origins, traced = _flatten(fg)

    # Captured resources: map their placeholders to the variables behind them.
    variables, var_of_placeholder = captured_variables(cf)
    internal = tfcompat.internal_captures(fg)
    # The placeholders the call's arguments feed: every input that no captured value feeds. (Not a count from the
    # front: under MirroredStrategy a captured handle's placeholder can be listed among the inputs twice.)
    captured_ph = {id(t) for t in internal}
    arg_inputs = [t for t in fg.inputs if id(t) not in captured_ph]

    graph = OpGraph()
    roles = {t.op.name: f"arg:{i}" for i, t in enumerate(arg_inputs)}
    roles.update({inn.op.name: (f"var:{var_of_placeholder[inn.op.name]}" if inn.op.name in var_of_placeholder
                                else f"capture:{inn.dtype.name}") for inn in internal})
    scope = Scope(graph, variables)
    resolve = lambda t: var_of_placeholder.get(handle_source(t).op.name, OPAQUE_STATE)  # noqa: E731
    scratch = scope.add("", flat_gd, origins, roles, resolve, traced)
    jit = tfcompat.jit_compile(target.step)
    scope.enter_bodies("", scratch, origins, resolve)
    graph.add_resource_edges()
    return Trace(graph=graph, graph_def=flat_gd, concrete=cf,
                 arg_names=[t.op.name for t in arg_inputs],
                 capture_names=[t.op.name for t in internal],
                 output_names=[t.name for t in fg.outputs],
                 variables=variables,
                 jit_compile=jit, regions=scope.regions, mirrors=mirrored_keys(variables))


def keep_sites(first, again) -> None:
    """Give the ops of a step traced again from a GraphDef (`again`, an OpGraph: its ops have no creation frames)
    the user and library sites they had in the first trace (`first`)."""
    for op in again.g:
        if op in first.g:
            for key in ("site", "library_site"):
                again.attrs(op)[key] = first.attrs(op).get(key, "")


def mirrored_keys(variables: dict) -> list[list[str]]:
    """For each MirroredVariable the step uses, its copies' keys in replica order (replica 0 first). MirroredStrategy
    names replica k's copy `<name>/replica_k`; without such names there is nothing to look for."""
    if not any(re.search(r"/replica_\d+$", key.split("#")[0]) for key in variables):
        return []
    key_of = {id(v.handle): k for k, v in variables.items()}
    groups = [[key_of[id(c.handle)] for c in copies if id(c.handle) in key_of]
              for copies in tfcompat.mirrored_copies()]
    return sorted(g for g in groups if len(g) > 1)


@dataclasses.dataclass
class _Body:
    """One body of a loop or branch op: its attr suffix, its function's name, its FuncGraph, a loop's cond."""

    suffix: str
    function: str
    graph: Any
    cond: Any


class Scope:
    """Adds the top-level graph, then each loop and branch body (any depth), to one OpGraph."""

    def __init__(self, graph: OpGraph, variables: dict):
        self.graph, self.variables = graph, variables
        self.regions: dict[str, Region] = {}
        self.sites: dict = {}  # an op's creation stack -> its (user site, library site)

    def add(self, region: str, flat_gd, origins: dict, roles: dict, resolve, traced=None) -> Any:
        """Add the ops of one (flat) GraphDef as `region::name`; the tf.Graph holding them, for output dtypes,
        shapes and statefulness: `traced`, the graph the GraphDef was written from, where no call was inlined;
        else a scratch graph it is imported into (at 100k ops the import took about a tenth of the trace).
        `resolve(tensor)` names the variable behind a resource tensor of this scope."""
        import tensorflow as tf

        scratch = traced
        if scratch is None:
            scratch = tf.Graph()
            with scratch.as_default():
                tf.graph_util.import_graph_def(flat_gd, name="")
        self._add_ops(region, scratch, {n.name: n for n in flat_gd.node}, origins, roles)
        self._add_edges(region, scratch, resolve)
        return scratch

    def _add_ops(self, region: str, scratch, nodes: dict, origins: dict, roles: dict) -> None:
        for op in scratch.get_operations():
            user_site, lib_site = _site(origins.get(op.name), self.sites)
            extra = {}
            if optypes.has(op.type, optypes.RANDOM):
                extra = {k: int(op.get_attr(k)) for k in ("seed", "seed2") if k in op.node_def.attr}
            if region:
                extra["region"] = region
            self.graph.add_op(op_id(op.name, region), type=op.type, stateful=bool(op.op_def.is_stateful),
                              outputs=[(t.dtype.name, str(t.shape)) for t in op.outputs],
                              site=user_site, library_site=lib_site, device=op.device, role=roles.get(op.name, ""),
                              attrs_digest=attrs_digest(nodes[op.name]), **extra)

    def _add_edges(self, region: str, scratch, resolve) -> None:
        """Data and control edges, and for each op the variables its resource inputs name."""
        import tensorflow as tf

        # A collective's resource input orders it among the others: no state. The handle may also pass through
        # a branch or loop op to collectives in its body (MirroredStrategy's all-gather of sparse gradients).
        tokens = {handle_source(t).op.name for op in scratch.get_operations()
                  if optypes.has(op.type, optypes.COLLECTIVE) for t in op.inputs if t.dtype == tf.resource}
        graph = self.graph
        for op in scratch.get_operations():
            me = op_id(op.name, region)
            for slot, t in enumerate(op.inputs):
                graph.add_data_edge(op_id(t.op.name, region), t.value_index, me, slot)
            for c in op.control_inputs:
                graph.add_control_edge(op_id(c.name, region), me)
            resources, res_dtypes = [], {}
            for slot, t in enumerate(op.inputs):
                if t.dtype != tf.resource or handle_source(t).op.name in tokens:
                    continue
                var = resolve(t)
                resources.append((slot, var))
                if var != OPAQUE_STATE:
                    res_dtypes[str(slot)] = self.variables[var].dtype.name
            graph.attrs(me)["resources"] = resources
            graph.attrs(me)["res_dtypes"] = res_dtypes

    def enter_bodies(self, region: str, scratch, origins: dict, resolve) -> None:
        """Add the bodies of every loop and branch op of a scope, and theirs in turn."""
        for op in scratch.get_operations():
            for suffix, fname in optypes.body_functions(op.type, op.node_def.attr):
                origin = origins.get(op.name)
                inner = tfcompat.function_graph(origin.graph if origin else None, fname)
                if inner is not None:
                    cond = tfcompat.function_graph(origin.graph, op.node_def.attr["cond"].func.name) \
                        if optypes.loops(op.type) else None
                    self._enter(region, op, _Body(suffix, fname, inner, cond), resolve)

    def _enter(self, parent: str, op, body: "_Body", resolve) -> None:
        suffix, fname, inner, cond = body.suffix, body.function, body.graph, body.cond
        rid = f"{op_id(op.name, parent)}/{suffix}"
        body_gd, body_origins, traced = _flatten(inner)
        args = [t.op.name for t in inner.inputs]
        offset = 0 if optypes.loops(op.type) else 1  # an If's input 0 is its predicate, a Case's its index
        index = {a: k for k, a in enumerate(args)}

        def resolve_body(t):  # a handle that enters the body as an argument is the one the op was given
            src = handle_source(t)
            k = index.get(src.op.name)
            return resolve(op.inputs[k + offset]) if k is not None else OPAQUE_STATE

        roles = {a: f"region_arg:{k}" for k, a in enumerate(args)}
        body_scratch = self.add(rid, body_gd, body_origins, roles, resolve_body, traced)
        me = op_id(op.name, parent)
        self.graph.add_region(rid, kind="loop" if optypes.loops(op.type) else "branch", op=me, parent=parent,
                              args=[op_id(a, rid) for a in args], offset=offset,
                              outputs=[self.graph.output(op_id(t.op.name, rid), t.value_index) for t in inner.outputs])
        for k, a in enumerate(args):  # what feeds the op, and what is ordered before it, comes before its body
            self.graph.add_region_edge(op_id(op.inputs[k + offset].op.name, parent), op_id(a, rid))
            for c in op.control_inputs:
                self.graph.add_region_edge(op_id(c.name, parent), op_id(a, rid))
        for t in inner.outputs:
            self.graph.add_region_edge(op_id(t.op.name, rid), me)
        for x in self.graph.region_ops(rid):  # the whole body runs before the op is done
            if self.graph.g.out_degree(x) == 0:
                self.graph.add_region_edge(x, me)
        self.regions[rid] = Region(id=rid, op=op.name, op_type=op.type, suffix=suffix, function=fname,
                                   graph_def=body_gd, arg_names=args, output_names=[t.name for t in inner.outputs],
                                   arg_specs=[(t.dtype, t.shape) for t in inner.inputs], parent=parent, cond=cond)
        self.enter_bodies(rid, body_scratch, body_origins, resolve_body)
