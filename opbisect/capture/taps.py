"""Capture: an instrumented copy of the traced step that also returns fingerprints of chosen tensors.

The instrumented step is the flat GraphDef plus capture nodes, imported into a fresh tf.function and fed with
the user's arguments and the captured values (variable handles among them), so it runs on the user's real
variables. Capture nodes are added to the GraphDef itself:
- an output `op:i` gets a copy of the fingerprint template stamped next to it;
- the state after a write, `op:res<i>`, is read by a ReadVariableOp ordered right after the write and before
  every later use of the variable (control edges), then fingerprinted.
All digests are packed into one int64 vector, so one small copy reaches the host per run. The chosen set of
taps is an argument, so bisection can tap only a frontier. `full` names tensors returned whole (for the
magnitude pass of the sources only).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from ..graphdef.importer import UNOPTIMIZED, step_importer
from ..ir.ids import TensorRef
from ..tfcompat import grappler_options, read_now
from ..trace.trace import Trace
from .builder import PREFIX, GraphDefBuilder, digest_vector, tap_specs, tappable_tensors
from .fingerprint import Fingerprinter, for_device
from .regions import Rebuild, empty_matrices, read_rows, rewrite_control_flow, slot_zeros


@dataclasses.dataclass
class Instrumented:
    taps: list[str]
    full: list[str]
    fn: Any  # tf.function(*feeds) -> (int64[len(taps)], [step outputs], [full tensors])
    trace: Trace
    regions: list[str] = dataclasses.field(default_factory=list)  # entered bodies, in the order returned
    region_taps: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # the columns of each matrix
    layout: np.ndarray | None = None  # tap index of each position of the digest vector (None: tap order)
    concrete: Any = None  # traced once, on the first call: resource handles would retrace the tf.function
    calls: int = 0  # the first traces and compiles the function: timed apart (Runner.instrumented)
    values: Any = None  # capture.values.BodyValues: what the bodies hand over, per run
    slots: list[str] = dataclasses.field(default_factory=list)  # the values threaded out, returned after the matrices

    def __call__(self, args: tuple) -> tuple[np.ndarray, list, list, dict[str, np.ndarray]]:
        """Digests of the taps, the step's outputs, the `full` tensors, and per entered body its digest matrix
        (a row per execution of the body in this step, a column per tap of the body)."""
        feeds = self.trace.flat_args(args)
        if self.concrete is None:  # for the traced specs: a partial last batch is fed to the same function
            specs = self.trace.arg_specs()
            self.concrete = self.fn.get_concrete_function(*(specs if len(specs) == len(feeds) else feeds))
        if self.values is not None:
            self.values.start_run()
        fps, outs, full, matrices = self.concrete(*feeds)
        self.calls += 1
        digests = fps.numpy()
        if self.layout is not None:
            in_order = np.empty_like(digests)
            in_order[self.layout] = digests
            digests = in_order
        bodies = {r: read_rows(self.trace, r, m.numpy()) for r, m in zip(self.regions, matrices)}
        if self.slots:
            self.values.keep({s: v.numpy() for s, v in zip(self.slots, matrices[len(self.regions):])},
                             {r: ran for r, (_, ran) in bodies.items()})
        return digests, list(outs), [t.numpy() for t in full], bodies

    def unrolled(self, fps: list[np.ndarray], bodies: list[dict]) -> tuple[list[str], list[list]]:
        """Every run's digests as one row over the same columns: the taps, then each body's taps at each
        execution (`region::op:0@k`), as many executions as the most any run had; None where a run had fewer."""
        taps, rows = list(self.taps), [list(map(int, f)) for f in fps]
        matrices = [{r: m for r, (m, _) in run.items()} for run in bodies]
        for r in self.regions:
            most = max((m[r].shape[0] for m in matrices), default=0)
            width = len(self.region_taps[r])
            for k in range(most):
                for tid in self.region_taps[r]:
                    ref = TensorRef.parse(tid)
                    taps.append(str(ref.at(k)))
            for row, m in zip(rows, matrices):
                block = m[r][:, 1:]  # column 0: where it ran
                for k in range(most):
                    row.extend(block[k].tolist() if k < block.shape[0] else [None] * width)
        return taps, rows


@dataclasses.dataclass
class Wanted:
    """What an instrumented step hands back. `taps`: fingerprinted; `full`: whole values. `descend`: rebuild the
    entered loop and branch bodies with taps of their own. `grouped`: no digest nodes for the top level's taps; the
    specs of the tapped tensors themselves stand for the vector, for `fingerprinter.many` to digest after the
    import. `values`: tensors the bodies hand over (capture.values)."""

    taps: list
    full: list = ()
    descend: bool = True
    grouped: bool = False
    values: object = None


def instrumented_graph_def(trace: Trace, fingerprinter: Fingerprinter, wanted: Wanted):
    """(the builder holding the GraphDef, fingerprint vector spec, specs of the `full` tensors, layout of the vector
    or None, {region: spec of its digest matrix, then threaded slot: spec of its value})."""
    taps, full, values = wanted.taps, wanted.full, wanted.values
    graph = trace.graph
    b = GraphDefBuilder(trace.graph_def)
    spec = tap_specs(b, graph, "", taps)
    specs = [(spec(t), graph.dtype(t)) for t in taps]
    fps, layout = ([s for s, _ in specs], None) if wanted.grouped else digest_vector(b, graph, specs, fingerprinter)
    if not wanted.descend:
        return b, fps, [spec(t) for t in full], layout, {}
    index, matrices = empty_matrices(b, trace)
    threaded = values.slots(list(trace.regions)) if values is not None else []
    slots = {s: f"{PREFIX}/slot/{j}" for j, s in enumerate(threaded)}
    regions = rewrite_control_flow(Rebuild(b, trace, fingerprinter, values), "", index,
                                   {**matrices, **{s: f"{name}:0" for s, name in slots.items()}})
    slot_zeros(b, trace, values, slots)  # now that the bodies are traced: their shapes are known
    return b, fps, [spec(t) for t in full], layout, regions


def build(trace: Trace, taps: list[str], fingerprinter: Fingerprinter, full: list[str] = (),
          descend: bool = True, values=None) -> Instrumented:
    """The instrumented step. `values` (capture.values.BodyValues): tensors inside bodies, each at one execution,
    threaded out of the bodies, or handed to the host by a callback XLA cannot compile (that step runs without
    XLA)."""
    import tensorflow as tf

    jit = bool(trace.jit_compile) and (values is None or values.threaded)
    # Under XLA the weighted sums are made after the import, grouped by size (`many`): a digest node per tap
    # compiles a reduction per tap (2000 taps of a small BERT-like step: most of the op analysis on a CPU).
    grouped = jit and not fingerprinter.fused
    b, fps_spec, full_specs, layout, region_specs = instrumented_graph_def(
        trace, fingerprinter, Wanted(taps, full, descend, grouped, values))
    regions = [k for k in region_specs if k in trace.regions]  # the rest: the slots of threaded values
    slots = [k for k in region_specs if k not in trace.regions]
    tapped = fps_spec if grouped else [fps_spec]
    wanted = tapped + list(trace.output_names) + full_specs + [region_specs[r] for r in regions + slots]
    importer = step_importer(trace, b.gd, b.register, wanted)
    k, n, m = len(tapped), len(trace.output_names), len(full_specs)

    def body(*feeds):
        got = importer(*feeds)
        fps = fingerprinter.many(got[:k]) if grouped else got[0]
        return fps, got[k:k + n], got[k + n:k + n + m], got[k + n + m:]

    fn = tf.function(body, autograph=False,
                     jit_compile=trace.jit_compile if values is None or values.threaded else False)
    return Instrumented(taps=list(taps), full=list(full), fn=fn, trace=trace, regions=regions, slots=slots,
                        region_taps={r: tappable_tensors(trace, r)[0] for r in regions},
                        layout=None if layout is None else np.asarray(layout), values=values)


def fingerprinter_for(trace: Trace, device: str, choice: str = "auto") -> tuple[Fingerprinter, str]:
    """fingerprint.for_device for a traced step: its XLA compilation and how many tensors capture taps decide with
    the device."""
    return for_device(device, jit=bool(trace.jit_compile), choice=choice, taps=len(tappable_tensors(trace)[0]))


EAGER_STATE_CALLS = 100  # as snapshot.EAGER_RESTORES: where tracing the function has paid for itself


def make_state_fingerprinter(variables: dict, fingerprinter: Fingerprinter) -> Callable[[], dict[str, int]]:
    """A callable fingerprinting every variable's current value, keyed like `variables`.

    With the fused op (one node for all the tensors) the first EAGER_STATE_CALLS calls read the variables and run
    the op eagerly (about 12 us a variable), later ones call one traced function (its tracing costs about 1.3 ms a
    variable: 3 s at 2400 variables, where an experiment calls this about 30 times). The digests are the same op's
    on the same bits. Other fingerprinters build several ops per tensor: always traced."""
    import tensorflow as tf

    keys = sorted(variables)
    values = [variables[k] for k in keys]
    fn = tf.function(lambda: fingerprinter.many([v.read_value() for v in values]), autograph=False)
    calls = [0]

    def state() -> dict[str, int]:
        if not keys:
            return {}
        calls[0] += 1
        if fingerprinter.fused and calls[0] <= EAGER_STATE_CALLS:
            return dict(zip(keys, fingerprinter.many([read_now(v) for v in values]).numpy().tolist()))
        with grappler_options(UNOPTIMIZED):  # our own function: grappler has nothing to gain, and costs minutes
            return dict(zip(keys, fn().numpy().tolist()))

    return state


def make_value_fingerprinter(fingerprinter: Fingerprinter) -> Callable[[list], list[int]]:
    """A callable fingerprinting a list of eager tensors (the step's outputs)."""
    import tensorflow as tf

    fn = tf.function(lambda ts: fingerprinter.many(list(ts)), autograph=False, reduce_retracing=True)

    def values(tensors: list) -> list[int]:
        tensors = [t for t in tensors if hasattr(t, "dtype") and t.dtype not in (tf.string, tf.resource, tf.variant)]
        return fn(tensors).numpy().tolist() if tensors else []

    return values
