"""The patched step: the traced step's GraphDef with the chosen nodes replaced, run on the user's own variables."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

from .. import tfcompat
from ..errors import LacksPatchedOps, UsageError
from ..graphdef.importer import step_importer
from ..graphdef.roundtrip import step_function
from .rewrite import rewrite
from .selection import Choice


class PatchedStep:
    """Called like the step (same arguments, same outputs); runs the patched graph."""

    def __init__(self, trace, choice: Choice, for_tracing: bool = False):
        """`for_tracing`: the step is to be traced again (`as_function`, for `trace --patch`), so its patched
        bodies are traced again around calls of the patches, which that trace can enter, not edited."""
        import tensorflow as tf

        if choice.unmatched:
            raise UsageError(f"--patch names {len(choice.unmatched)} op(s) this step does not have, e.g. "
                             f"{choice.unmatched[0]} (is the report from another version of the script?)")
        self.trace, self.choice = trace, choice
        self.rewrite = rewrite(trace, choice.by_region(), edit_bodies=not for_tracing)
        body = step_importer(trace, self.rewrite.graph_def, self.rewrite.register, list(trace.output_names))
        self.fn = tf.function(body, autograph=False, jit_compile=trace.jit_compile)
        self.concrete = None

    @property
    def replaced(self) -> list[str]:
        return self.rewrite.replaced

    @property
    def skipped(self) -> dict[str, str]:
        return self.rewrite.skipped

    def flat(self, *args) -> list:
        feeds = self.trace.flat_args(args)
        if self.concrete is None:  # for the traced specs: a partial last batch runs the same function
            specs = self.trace.arg_specs()
            self.concrete = self.fn.get_concrete_function(*(specs if len(specs) == len(feeds) else feeds))
        return self.concrete(*feeds)

    def __call__(self, *args):
        return tfcompat.pack_outputs(self.trace.concrete, self.flat(*args))

    def as_function(self):
        """A tf.function of the step's own arguments whose graph is the patched step under the step's own op
        names (a patch's ops are inside a call named as the op it replaces): what `opbisect trace --patch`
        traces, to find the sources the patched ones hid."""
        retraced = self.rewrite if not self.rewrite.bodies else \
            rewrite(self.trace, self.choice.by_region(), edit_bodies=False)  # a trace cannot enter an edited body
        return step_function(self.trace, retraced.without_own_functions(), retraced.register)


def _trace(function, args: tuple, name: str):
    from ..targets.loader import Target
    from ..trace.trace import trace_step

    target = Target(path=Path(name), step=function, make_inputs=lambda: args, variables=None, form="step",
                    module=None)
    return trace_step(target, args)


class PatchedCallable:
    """A callable like the step: on each new argument signature, trace, patch, and keep the patched step.

    Ops the patch names that a step lacks are warned of and left, since a script may train several steps (a model
    compiled again with another optimizer, a GAN's two steps) and a patch made from one names some ops only it
    has; `lacking` keeps them. `strict`: a step that has none of the named ops is refused instead (a patch made
    for another script or another version of it: one line, 128)."""

    def __init__(self, function, patch: str, name: str, strict: bool = True):
        self.function, self.patch, self.name, self.strict = function, patch, name, strict
        self.steps: dict = {}
        self.replaced: list[str] = []
        self.skipped: dict[str, str] = {}
        self.lacking: set[str] = set()

    def _for(self, args: tuple):
        import tensorflow as tf

        from .selection import choose

        key = tuple(str(tf.TensorSpec.from_tensor(t)) if hasattr(t, "dtype") else repr(t)
                    for t in tf.nest.flatten(args))
        if key not in self.steps:
            trace = _trace(self.function, args, self.name)
            step = PatchedStep(trace, self._chosen(choose(trace.graph, self.patch)))
            self.steps[key] = step
            self.replaced, self.skipped = step.replaced, step.skipped
            if step.skipped:
                op, why = next(iter(step.skipped.items()))
                warnings.warn(f"opbisect.deterministic left {len(step.skipped)} op(s) as they are, e.g. {op}: {why} "
                              f"(a family switch must be set before TensorFlow starts)", stacklevel=3)
        return self.steps[key]

    def _chosen(self, choice: Choice) -> Choice:
        """The choice a PatchedStep takes: with the ops this step lacks warned of and dropped, unless it is
        strict and has none (PatchedStep refuses those)."""
        if not choice.unmatched or (self.strict and not choice.ops):
            return choice
        self.lacking.update(choice.unmatched)
        warnings.warn(f"opbisect.deterministic: the {self.name} step lacks {len(choice.unmatched)} of the op(s) the "
                      f"patch names, e.g. {choice.unmatched[0]}: the {len(choice.ops)} it has are patched (a patch "
                      f"made from another step of the script, or a model compiled again)", LacksPatchedOps,
                      stacklevel=4)
        return dataclasses.replace(choice, unmatched=[])

    @property
    def used(self) -> bool:
        """Whether a step has been traced and patched (a train function made around it)."""
        return bool(self.steps)

    def __call__(self, *args):
        return self._for(args)(*args)
