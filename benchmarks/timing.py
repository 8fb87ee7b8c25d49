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

