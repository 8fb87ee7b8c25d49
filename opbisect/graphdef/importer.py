"""A changed GraphDef of the step, imported into the function being traced: its placeholders fed with the step's
arguments and captured values (the variables' handles among them), so the copy runs on the user's real variables.
The capture, the patches and the seeded-random twins all run the step this way."""

from __future__ import annotations

from collections.abc import Callable

from ..trace.inline import parse_input
from ..trace.trace import Trace

SCOPE = "step"  # the import scope of the instrumented step


def _without_fed_placeholders(gd, placeholders: list[str]):
    """The GraphDef without the placeholders that feeds replace, and the fed ones something still reads.

    An imported placeholder stays in the graph even when every use of it is remapped, and XLA refuses to
    compile a function holding one; so the fed placeholders go, and only the ones still read are mapped.
    """
    from tensorflow.core.framework import graph_pb2

    fed = set(placeholders)
    read = {parse_input(spec)[0] for n in gd.node for spec in n.input} & fed
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(gd.versions)
    out.library.CopyFrom(gd.library)
    out.node.extend(n for n in gd.node if n.name not in fed)
    colocated_with_present(out)
    return out, read


def colocated_with_present(gd) -> None:
    """Drop colocation constraints (`_class: loc:@name`) on nodes `gd` does not have: the import refuses them
    (tf_keras's embedding lookup is colocated with its table's captured handle, whose placeholder a feed replaces;
    the fed tensor sits where the handle does, so placement is unchanged)."""
    present = {n.name for n in gd.node}
    for node in gd.node:
        if "_class" not in node.attr:
            continue
        refs = list(node.attr["_class"].list.s)
        kept = [c for c in refs if c.decode(errors="replace").removeprefix("loc:@") in present]
        if len(kept) == len(refs):
            continue
        del node.attr["_class"].list.s[:]
        if kept:
            node.attr["_class"].list.s.extend(kept)
        else:
            del node.attr["_class"]


def graph_importer(graph_def, placeholders: list[str], wanted: list[str], scope: str) -> Callable[[dict], list]:
    """`run(feeds)` imports `graph_def` into the graph being built, its `placeholders` replaced by `feeds` ("name:0"
    -> tensor), and returns the tensors `wanted` (specs in the GraphDef; a placeholder gives what feeds it)."""
    import tensorflow as tf

    gd, read = _without_fed_placeholders(graph_def, placeholders)
    imported = [w for w in wanted if parse_input(w)[0] not in set(placeholders)]

    def run(feeds: dict) -> list:
        got = tf.graph_util.import_graph_def(gd, input_map={f"{n}:0": feeds[f"{n}:0"] for n in read},
                                             return_elements=imported, name=scope)
        by_spec = dict(zip(imported, got))
        return [by_spec[w] if w in by_spec else feeds[w] for w in wanted]

    return run


def step_importer(trace: Trace, graph_def, register: Callable, wanted: list[str], scope: str = SCOPE,
                  variables: dict | None = None) -> Callable:
    """A function of the step's flat arguments importing `graph_def` (the step's GraphDef, changed) and returning
    the tensors `wanted` (specs in it); `register(graph)` puts the functions it calls in the importing graph.
    `scope` prefixes the imported names ("": the step's own names, for a step traced again). `variables`
    ({placeholder name: tf.Variable}): placeholders the change added, fed with those variables' handles.

    The captured values (variable handles above all) are captured again by closure, not passed as arguments:
    a concrete function's call costs about 24 us more per tensor argument (300 handles: 8.3 ms against 1.2 ms
    captured, on the 2-core CPU machine), which the plain step, whose captures are bound, does not pay."""
    import tensorflow as tf

    added = dict(variables or {})
    placeholders = trace.arg_names + trace.capture_names + list(added)
    run = graph_importer(graph_def, placeholders, wanted, scope)
    captured = list(trace.concrete.captured_inputs)
    used = list(trace.variables.values()) + list(added.values())

    def body(*feeds):
        graph = tf.compat.v1.get_default_graph()  # the FuncGraph being traced
        register(graph)
        for v in used:  # the function uses these variables (as the step did): its graph lists them
            graph.watch_variable(v)
        values = list(feeds) + [graph.capture(c) for c in captured] + [graph.capture(v.handle) for v in added.values()]
        return run({f"{name}:0": t for name, t in zip(placeholders, values)})

    return body


UNOPTIMIZED = {"disable_meta_optimizer": True}  # grappler off, for opbisect's own helper functions
