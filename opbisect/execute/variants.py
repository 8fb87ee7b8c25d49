"""Run one variant of the step N times from one restored state: its results, its step times, its values.

A step is timed from the call to the moment every device is done (tf.test.experimental.sync_devices), after one
warm-up call that is not timed (tracing, XLA compilation, cuDNN autotuning happen there). The state is restored
before every run, outside the timed span. `time_steps` then times more steps of several variants in turn (a, b, a,
b, ...), so that a drift of the machine's speed falls on all of them alike, and `ratio_interval` says how far the
ratio of two variants' median times could move with other samples of the same steps.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable

import numpy as np

from ..analysis.magnitude import of_source


@dataclasses.dataclass
class Measured:
    results: list[tuple] = dataclasses.field(default_factory=list)  # per run: fingerprints of outputs and state
    times: list[float] = dataclasses.field(default_factory=list)  # seconds per step, of the runs above
    timed: list[float] = dataclasses.field(default_factory=list)  # seconds per step, of the timing steps after them
    first: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # the first run's values, by name
    spread: float = 0.0  # the largest difference of a later run from the first
    error: str = ""
    unchanged: list[str] = dataclasses.field(default_factory=list)  # variables the first run left as they were

    @property
    def distinct(self) -> int:
        return len(set(self.results))

    @property
    def samples(self) -> list[float]:
        """The step times the cost is measured on: the timing steps where there were some, else the runs'."""
        return self.timed or self.times

    @property
    def step_ms(self) -> float | None:
        return round(1000 * statistics.median(self.samples), 4) if self.samples else None


def _timed(call: Callable, args: tuple) -> tuple:
    """(call(*args)'s outputs, its seconds from a start with every device idle until every device is done)."""
    import tensorflow as tf

    tf.test.experimental.sync_devices()
    start = time.perf_counter()
    outputs = call(*args)
    tf.test.experimental.sync_devices()
    return outputs, time.perf_counter() - start


def time_steps(calls: list[Callable], args: tuple, restore: Callable, steps: int) -> list[list[float]]:
    """Seconds per step of each call, `steps` times, the calls in turn, each from `restore()` (not timed). Each
    call has run before (`measure`): nothing here traces or compiles."""
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(steps):
        for call, out in zip(calls, times):
            restore()
            out.append(_timed(call, args)[1])
    return times


def ratio_interval(times: list[float], base: list[float], draws: int = 2000) -> tuple[float, float] | None:
    """The 95% bootstrap interval of median(times) / median(base): each resampled with replacement, `draws`
    times, from a fixed seed (the same samples give the same interval). None with fewer than 5 samples of either."""
    if len(times) < 5 or len(base) < 5:
        return None
    rng = np.random.default_rng(0)
    a, b = np.asarray(times), np.asarray(base)
    ratios = np.median(rng.choice(a, (draws, a.size)), axis=1) / np.median(rng.choice(b, (draws, b.size)), axis=1)
    low, high = np.percentile(ratios, [2.5, 97.5])
    return round(float(low), 3), round(float(high), 3)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def values_after(outputs, variables: dict) -> dict[str, np.ndarray]:
    """The step's outputs (`out:<i>`) and every variable (by key) as host arrays."""
    import tensorflow as tf

    flat = [t for t in tf.nest.flatten(outputs, expand_composites=True) if hasattr(t, "numpy")]
    values = {f"out:{i}": np.asarray(t.numpy()) for i, t in enumerate(flat) if t.dtype != tf.resource}
    values.update({k: np.asarray(v.numpy()) for k, v in sorted(variables.items())})
    return values


def difference(a: dict[str, np.ndarray], b: dict[str, np.ndarray]):
    """The magnitude of the difference between two runs' values (the names both have)."""
    names = [n for n in a if n in b and a[n].shape == b[n].shape and a[n].dtype == b[n].dtype]
    return of_source([[a[n], b[n]] for n in names])


def measure(call: Callable, restore: Callable, fingerprint: Callable, variables: dict, runs: int,
            confirm: int = 0) -> Measured:
    """`call()` `runs` times, each from `restore()`, and where those all agree on to `confirm` runs in all (a rare
    variation hides in a few runs); `fingerprint(outputs)` gives a run's comparable result."""
    import tensorflow as tf

    out = Measured()
    try:
        restore()
        start = {k: np.asarray(v.numpy()) for k, v in sorted(variables.items())}
        tf.nest.map_structure(lambda t: t, call())  # warm-up: traces, compiles, autotunes
        tf.test.experimental.sync_devices()
        for k in range(max(runs, confirm)):
            if k == runs and out.distinct > 1:  # already seen to vary: nothing to confirm
                break
            restore()
            outputs, seconds = _timed(call, ())
            out.times.append(seconds)
            out.results.append(fingerprint(outputs))
            if not out.first:
                out.first = values_after(outputs, variables)
                out.unchanged = [k for k, v in start.items() if _same_bits(out.first[k], v)]
            elif out.results[-1] != out.results[0]:
                # Only a run whose fingerprints differ can add to the spread. Copying the whole state to the host
                # and comparing it, every run, took 0.53 s of each 0.68 s run on a 384 MB state (2-core CPU),
                # on every run of a confirmation.
                out.spread = max(out.spread, difference(out.first, values_after(outputs, variables)).max_abs_diff)
    except Exception as exc:  # noqa: BLE001 - a variant that cannot run is a finding, e.g. no deterministic kernel
        from ..targets.user_errors import error_summary

        out.error = error_summary(exc)
    return out
