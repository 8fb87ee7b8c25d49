"""The one timing rule of the benchmarks: the median of `repeats` calls, after warm-up calls."""

from __future__ import annotations

import statistics
import time


def timed(fn, repeats: int, sync, warmup: int = 3) -> float:
    """Median seconds of one call of `fn`, each waited for by `sync(result)`; warm-up calls (first-call
    compilation) stay out."""
    for _ in range(warmup):
        sync(fn())
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        sync(fn())
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def in_turn(fns: list, repeats: int, sync, warmup: int = 3) -> list[list[float]]:
    """Seconds of each call of each of `fns`, the functions called in turn `repeats` times (a drift of the machine's
    speed, which moves one block of calls against the next, falls on all alike), after warm-up calls of each."""
    for _ in range(warmup):
        for fn in fns:
            sync(fn())
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, out in zip(fns, samples):
            start = time.perf_counter()
            sync(fn())
            out.append(time.perf_counter() - start)
    return samples
