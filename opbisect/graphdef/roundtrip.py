"""The round trip of a changed step: its GraphDef, changed (a patch, the seeded restart's twins), imported into a
tf.function of the step's own arguments under the step's own op names, then traced again, with the sites (the
user's lines) of the first trace, which the copy no longer carries."""

from __future__ import annotations

from .. import tfcompat
from .importer import step_importer


def step_function(trace, graph_def, register, variables: dict | None = None):
    """A tf.function called like the step (same arguments, outputs packed as the step's) that runs `graph_def` under
    the step's own op names; `register(graph)` puts its functions in the graph; `variables` ({placeholder name:
    tf.Variable}) feed the placeholders the change added."""
    import tensorflow as tf

    body = step_importer(trace, graph_def, register, list(trace.output_names), scope="", variables=variables)

    def step(*args):
        return tfcompat.pack_outputs(trace.concrete, body(*trace.flat_args(args)))

    return tf.function(step, autograph=False, jit_compile=trace.jit_compile)


def traced_again(target, trace):
    """The trace of `target` (its step made by `step_function`) on the target's inputs, each op's site kept from
    `trace`, the trace of the step before the change."""
    from ..trace.trace import keep_sites, trace_step

    again = trace_step(target, target.make_inputs())
    keep_sites(trace.graph, again.graph)
    return again
