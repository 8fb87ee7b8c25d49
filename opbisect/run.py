"""Run: restore a snapshot, run the step (or K consecutive steps) N times, keep the fingerprints.

Passes, all from the identical restored state:
- `default`: the uninstrumented step under the user's own grappler configuration: the verdict;
- `pinned`: the uninstrumented step with the grappler passes that move under instrumentation pinned off;
- `instrumented`: the tapped step, under the configuration the analysis uses, from the state before one step.
Comparing `pinned` with `instrumented` tells whether capture changed what the step computes.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Callable, Iterator

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
class Trajectory:
    """Per run and per step: fingerprints of the step's arguments, its outputs, and every variable after it."""

    batches: list[list[list[int]]] = dataclasses.field(default_factory=list)  # [run][step]
    outputs: list[list[list[int]]] = dataclasses.field(default_factory=list)
    after: list[list[dict[str, int]]] = dataclasses.field(default_factory=list)

    @property
    def steps(self) -> int:
        return len(self.outputs[0]) if self.outputs else 0

    def at(self, step: int) -> PlainRuns:
        """The runs' results after `step` (1-based)."""
        return PlainRuns(outputs=[run[step - 1] for run in self.outputs], after=[run[step - 1] for run in self.after])

    def final(self) -> PlainRuns:
        return self.at(self.steps)

    def first_differing_step(self) -> int | None:
        return next((k for k in range(1, self.steps + 1) if not self.at(k).deterministic()), None)

    def differing_variables(self) -> list[int]:
        """How many variables differ between runs after each step."""
        return [len(self.at(k).varying_variables()) for k in range(1, self.steps + 1)]

    def differing_batches(self) -> list[int]:
        """Steps (1-based) whose arguments differ between runs (re-created iterators, or inputs())."""
        return [k for k in range(1, self.steps + 1) if len({tuple(run[k - 1]) for run in self.batches}) > 1]


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
        tf.config.optimizer.set_experimental_options({k: previous.get(k, True) for k in options})


def pinned_options(pin: bool) -> dict | None:
    return dict(PINNED_GRAPPLER) if pin else None


class Feeder:
    """The arguments of each step of one run: the target's `batches()` (a fresh iterator per run) when it
    has them, else its `inputs` for every step."""

    def __init__(self, target, steps: int):
        self.target, self.steps = target, steps
        if target.steps_available is not None and steps > target.steps_available:
            raise TargetError(f"--steps {steps}, but the data gives {target.steps_available} steps")

    def batch(self, step: int) -> tuple:
        """The arguments of `step` (1-based) from a fresh iterator."""
        for k, args in enumerate(self.run(), 1):
            if k == step:
                return args
        raise TargetError(f"`batches()` ran out before step {step}")

    def run(self) -> Iterator[tuple]:
        if self.target.make_batches is None:
            for _ in range(self.steps):
                yield self.target.make_inputs()
            return
        produced = 0
        for args in self.target.make_batches():
            if produced == self.steps:
                return
            produced += 1
            yield args
        if produced < self.steps:
            raise TargetError(f"`batches()` ran out after {produced} of --steps {self.steps}")


class Runner:
    """Runs the step from a snapshot; every pass of the experiment goes through here."""

    def __init__(self, trace, target, state_fps: Callable, output_fps: Callable, progress=None):
        self.trace, self.target = trace, target
        self.state_fps, self.output_fps = state_fps, output_fps
        self.progress = progress

    def restore(self, snapshot) -> dict[str, int]:
        """Restore `snapshot` and check it came back bit for bit; the state fingerprints before the step."""
        snapshot.restore()
        before = self.state_fps()
        if snapshot.expected is None:
            snapshot.expected = {k: before[k] for k in snapshot.keys}
        wrong = [k for k in snapshot.keys if before[k] != snapshot.expected[k]]
        if wrong:
            raise CannotTest(f"restoring the snapshot did not bring back {wrong[0]} bit for bit")
        return before

    def call(self, args):
        try:
            return self.trace.concrete(*args)
        except TargetError:
            raise
        except Exception as exc:
            raise _step_error(exc, self.target) from None

    def arguments(self, args) -> list[int]:
        import tensorflow as tf

        flat = [tf.convert_to_tensor(a) for a in tf.nest.flatten(args) if hasattr(a, "dtype") or
                isinstance(a, (int, float, bool))]
        return self.output_fps(flat)

    def plain(self, snapshot, feeder: Feeder, runs: int, options: dict | None, label: str) -> Trajectory:
        import tensorflow as tf

        result = Trajectory()
        with grappler(options), self._task(label, runs * feeder.steps) as advance:
            for _ in range(runs):
                self.restore(snapshot)
                batches, outputs, after = [], [], []
                for args in feeder.run():
                    batches.append(self.arguments(args))
                    out = self.call(args)
                    outputs.append(self.output_fps(tf.nest.flatten(out, expand_composites=True)))
                    after.append(self.state_fps())
                    advance()
                result.batches.append(batches)
                result.outputs.append(outputs)
                result.after.append(after)
        return result

    def fit(self, snapshot, plan, runs: int, label: str) -> Trajectory:
        """`model.fit` itself, from the snapshot, `runs` times: every variable after every batch."""
        import keras

        state_fps = self.state_fps

        class AfterEachBatch(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.after = []

            def on_train_batch_end(self, batch, logs=None):
                self.after.append(state_fps())

        result = Trajectory()
        kwargs = {k: v for k, v in plan.kwargs.items() if k not in ("verbose", "callbacks", "batch_size")}
        kwargs["shuffle"] = False  # fit gets a dataset: the data's own order (x/y arrays were batched unshuffled)
        with self._task(label, runs) as advance:
            for _ in range(runs):
                self.restore(snapshot)
                recorder = AfterEachBatch()
                try:
                    plan.model.fit(plan.dataset, verbose=0, callbacks=[recorder, *plan.kwargs.get("callbacks", [])],
                                   **kwargs)
                except Exception as exc:
                    raise _step_error(exc, self.target) from None
                result.after.append(recorder.after)
                result.outputs.append([[] for _ in recorder.after])
                result.batches.append([[] for _ in recorder.after])
                advance()
        return result

    def instrumented(self, inst, snapshot, args_for_run: Callable[[], tuple], runs: int, options: dict | None,
                     label: str) -> tuple[InstrumentedRuns, list]:
        """Fingerprints per run, and the `full` tensors of every run (empty unless `inst.full`)."""
        result, full = InstrumentedRuns(taps=inst.taps), []
        with grappler(options), self._task(label, runs) as advance:
            for _ in range(runs):
                result.before.append(self.restore(snapshot))
                args = args_for_run()
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

    return TargetError(f"the step raised {error_summary(exc)}", user_traceback(exc, target.path))
