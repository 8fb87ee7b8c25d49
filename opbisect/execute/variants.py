"""Run one variant of the step N times from one restored state: its results, its step times, its values.

A step is timed from the call to the moment every device is done (tf.test.experimental.sync_devices), after one
warm-up call that is not timed (tracing, XLA compilation, cuDNN autotuning happen there). The state is restored
before every run, outside the timed span.
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
    times: list[float] = dataclasses.field(default_factory=list)  # seconds per step
    first: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # the first run's values, by name
    spread: float = 0.0  # the largest difference of a later run from the first
    error: str = ""

    @property
    def distinct(self) -> int:
        return len(set(self.results))

    @property
    def step_ms(self) -> float | None:
        return round(1000 * statistics.median(self.times), 4) if self.times else None


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


def measure(call: Callable, args: tuple, restore: Callable, fingerprint: Callable, variables: dict,
            runs: int) -> Measured:
    """`call(*args)` `runs` times, each from `restore()`; `fingerprint(outputs)` gives a run's comparable result."""
    import tensorflow as tf

    out = Measured()
    try:
        restore()
        tf.nest.map_structure(lambda t: t, call(*args))  # warm-up: traces, compiles, autotunes
        tf.test.experimental.sync_devices()
        for _ in range(runs):
            restore()
            tf.test.experimental.sync_devices()
            start = time.perf_counter()
            outputs = call(*args)
            tf.test.experimental.sync_devices()
            out.times.append(time.perf_counter() - start)
            out.results.append(fingerprint(outputs))
            values = values_after(outputs, variables)
            if not out.first:
                out.first = values
            else:
                out.spread = max(out.spread, difference(out.first, values).max_abs_diff)
    except Exception as exc:  # noqa: BLE001 - a variant that cannot run is a finding, e.g. no deterministic kernel
        from ..targets.loader import error_summary

        out.error = error_summary(exc)
    return out
