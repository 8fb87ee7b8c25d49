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
from collections.abc import Callable, Iterator

from ..errors import CannotTest, InternalError, TargetError, stop_if_came
from ..record.model import InstrumentedRuns, Trajectory
from ..settings import PINNED_GRAPPLER
from ..targets.user_errors import error_summary, user_traceback
from ..tfcompat import grappler_options


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

    def __init__(self, trace, target, state_fps: Callable, output_fps: Callable, progress=None,
                 lap: Callable[[str], None] = lambda stage: None):
        self.trace, self.target = trace, target
        self.state_fps, self.output_fps = state_fps, output_fps
        self.progress = progress
        self.lap = lap  # experiment.Laps: the op analysis's stages, where an XLA step's compile shows apart

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
        with grappler_options(options), self._task(label, runs * feeder.steps) as advance:
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
        per_epoch = max(1, (self.target.steps_available or 0) // max(plan.epochs, 1))
        result = Trajectory()
        kwargs = {k: v for k, v in plan.kwargs.items() if k not in ("verbose", "callbacks", "batch_size")}
        kwargs["shuffle"] = False  # fit gets a dataset: the data's own order (x/y arrays were batched unshuffled)
        with self._task(label, runs) as advance:
            for _ in range(runs):
                self.restore(snapshot)
                if snapshot.restart is not None:
                    snapshot.restart.before_fit()  # fit's own train function holds the seeded random ops as written
                recorder = after_each_batch(plan.model, self.state_fps, per_epoch)
                try:
                    plan.model.fit(plan.dataset, verbose=0, callbacks=[recorder, *plan.kwargs.get("callbacks", [])],
                                   **kwargs)
                except Exception as exc:
                    raise _step_error(exc, self.target) from None
                result.after.append(recorder.after)
                result.steps_at = recorder.steps
                result.outputs.append([[] for _ in recorder.after])
                result.batches.append([[] for _ in recorder.after])
                advance()
        return result

    def instrumented(self, inst, snapshot, args_for_run: Callable[[], tuple], how: "Pass",
                     ) -> tuple[InstrumentedRuns, list]:
        """Fingerprints per run, and the `full` tensors of every run (empty unless `inst.full`). Timed as
        `how.stage`: its first call (grappler or XLA compiling the function), then the other runs."""
        result, full, digests, matrices = InstrumentedRuns(taps=inst.taps), [], [], []
        stage = how.stage
        with grappler_options(how.options), self._task(how.label, how.runs) as advance:
            for _ in range(how.runs):
                result.before.append(self.restore(snapshot))
                args = args_for_run()
                try:
                    fps, outs, whole, bodies = inst(args)
                except TargetError:
                    raise
                except Exception as exc:
                    raise InternalError(f"the instrumented step failed where the plain step ran "
                                        f"({error_summary(exc)})") from None
                digests.append(fps)
                matrices.append(bodies)
                result.outputs.append(self.output_fps(outs))
                result.after.append(self.state_fps())
                full.append(whole)
                advance()
                self.lap(f"op analysis: {stage}, {'first call' if inst.calls == 1 else 'runs'}")
        result.taps, result.fps = inst.unrolled(digests, matrices)
        result.executions = {r: [int(m[r][1]) for m in matrices] for r in inst.regions}
        result.enclosing = {r: [int(x) for x in matrices[0][r][0][:, 0]] for r in inst.regions} if matrices else {}
        return result, full

    @contextlib.contextmanager
    def _task(self, label: str, total: int):
        """`advance`, called after each run or step: the progress bar's, and a checkpoint for a stop signal whose
        exception was dropped."""
        if self.progress is None:
            yield stop_if_came
            return
        task = self.progress.add_task(label, total=total)

        def advance():
            stop_if_came()
            self.progress.advance(task)

        try:
            yield advance
        finally:
            self.progress.update(task, visible=False)


@dataclasses.dataclass(frozen=True)
class Pass:
    """Runs of an instrumented step: how many, under which grappler options, its progress label and its lap."""

    runs: int
    options: dict | None
    label: str
    stage: str = "tapped step"


def after_each_batch(model, state_fps: Callable, per_epoch: int):
    """A Keras callback of the model's own Keras line that keeps the state after each call of fit's train function,
    and the step it is after: with steps_per_execution > 1, Keras calls back once per execution, with the index the
    execution's last batch would have had (past the epoch's end for a short last execution)."""
    from ..tfcompat import keras_of

    class AfterEachBatch(keras_of(model).callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.after, self.steps, self.epochs = [], [], 0

        def on_epoch_begin(self, epoch, logs=None):
            self.epochs += 1

        def on_train_batch_end(self, batch, logs=None):
            self.after.append(state_fps())
            self.steps.append((self.epochs - 1) * per_epoch + min(batch + 1, per_epoch))

    return AfterEachBatch()


def _step_error(exc: BaseException, target) -> TargetError:
    return TargetError(f"the step raised {error_summary(exc)}", user_traceback(exc, target.path))
