"""Run: restore the snapshot, run the step N times, keep the fingerprints.

Three passes, all from the identical restored state:
- `default`: the uninstrumented step under the user's own grappler configuration: the verdict;
- `pinned`: the uninstrumented step with the grappler passes that move under instrumentation pinned off;
- `instrumented`: the tapped step, under the configuration the analysis uses.
Comparing `pinned` with `instrumented` tells whether capture changed what the step computes.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Callable

from .errors import CannotTest, TargetError
from .settings import PINNED_GRAPPLER
from .target import error_summary


@dataclasses.dataclass
class PlainRuns:
    """Fingerprints of the step's flat outputs and of every variable after it, per run."""

    outputs: list[list[int]] = dataclasses.field(default_factory=list)
    after: list[dict[str, int]] = dataclasses.field(default_factory=list)

    def distinct(self) -> int:
        return len({(tuple(o), tuple(sorted(a.items()))) for o, a in zip(self.outputs, self.after)})

    def deterministic(self) -> bool:
        return self.distinct() <= 1

    def varying_variables(self) -> list[str]:
        keys = sorted(self.after[0]) if self.after else []
        return [k for k in keys if len({a.get(k) for a in self.after}) > 1]


@dataclasses.dataclass
class InstrumentedRuns:
    taps: list[str]
    fps: list[list[int]] = dataclasses.field(default_factory=list)  # [run][tap]
    before: list[dict[str, int]] = dataclasses.field(default_factory=list)
    after: list[dict[str, int]] = dataclasses.field(default_factory=list)
    outputs: list[list[int]] = dataclasses.field(default_factory=list)

    def as_plain(self) -> PlainRuns:
        return PlainRuns(outputs=self.outputs, after=self.after)


@contextlib.contextmanager
def grappler(options: dict | None):
    """Run under these grappler options, then put the previous ones back (they apply per call)."""
    import tensorflow as tf

    if not options:
        yield
        return
    previous = tf.config.optimizer.get_experimental_options()
    tf.config.optimizer.set_experimental_options(options)
    try:
        yield
    finally:
        restore = {k: previous.get(k, True) for k in options}
        tf.config.optimizer.set_experimental_options(restore)


def pinned_options(pin: bool) -> dict | None:
    return dict(PINNED_GRAPPLER) if pin else None


class Runner:
    """Runs one step from the restored snapshot; every stage of the experiment goes through here."""

    def __init__(self, trace, target, snapshot, state_fps: Callable, output_fps: Callable, progress=None):
        self.trace, self.target, self.snapshot = trace, target, snapshot
        self.state_fps, self.output_fps = state_fps, output_fps
        self.progress = progress
        self.expected_state = None

    def _restore(self) -> dict[str, int]:
        self.snapshot.restore()
        before = self.state_fps()
        if self.expected_state is None:
            self.expected_state = {k: before[k] for k in self.snapshot.keys}
        wrong = [k for k in self.snapshot.keys if before[k] != self.expected_state[k]]
        if wrong:
            raise CannotTest(f"restoring the snapshot did not bring back {wrong[0]} bit for bit")
        return before

    def _call_plain(self, args):
        try:
            return self.trace.concrete(*args)
        except Exception as exc:
            raise _step_error(exc, self.target) from None

    def plain(self, runs: int, options: dict | None, label: str) -> PlainRuns:
        result = PlainRuns()
        with grappler(options), self._task(label, runs) as advance:
            for _ in range(runs):
                self._restore()
                out = self._call_plain(self.target.make_inputs())
                import tensorflow as tf

                result.outputs.append(self.output_fps(tf.nest.flatten(out, expand_composites=True)))
                result.after.append(self.state_fps())
                advance()
        return result

    def instrumented(self, inst, runs: int, options: dict | None, label: str) -> tuple[InstrumentedRuns, list]:
        """Fingerprints per run, and the `full` tensors of every run (empty unless `inst.full`)."""
        result, full = InstrumentedRuns(taps=inst.taps), []
        with grappler(options), self._task(label, runs) as advance:
            for _ in range(runs):
                result.before.append(self._restore())
                args = self.target.make_inputs()
                try:
                    fps, outs, whole = inst(args)
                except TargetError:
                    raise
                except Exception as exc:
                    raise CannotTest(f"the instrumented step failed where the plain step ran ({error_summary(exc)}); "
                                     f"this is an opbisect bug: please report it") from None
                result.fps.append(fps.tolist())
                result.outputs.append(self.output_fps(outs))
                result.after.append(self.state_fps())
                full.append(whole)
                advance()
        return result, full

    @contextlib.contextmanager
    def _task(self, label: str, total: int):
        if self.progress is None:
            yield lambda: None
            return
        task = self.progress.add_task(label, total=total)
        try:
            yield lambda: self.progress.advance(task)
        finally:
            self.progress.update(task, visible=False)


def _step_error(exc: BaseException, target) -> TargetError:
    from .target import user_traceback

    return TargetError(f"the step raised {error_summary(exc)}",
                       user_traceback(exc, target.path))
