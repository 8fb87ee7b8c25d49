"""The segment-sum patch under XLA in its two forms, against XLA's own atomic segment sum, side by side in one run:
the scan (keys packed with their positions and sorted by XLA's plain Sort, a doubling scan, a segment sum of zeros
and each key's sum) and the fixed point (each segment's rows scaled to int64, added by XLA's scatter, scaled back).
Device time per call (each compiled function alone, under TensorFlow's profiler), kernels per call, distinct
results in 20 calls, and the largest difference from a float64 sum, with the count of elements that differ from
the float64 sum rounded once to float32. (Session 15 timed tf.argsort, a TopKV2 under XLA, 47.0 against the
packed sort's 41.7 us at 2048 rows, and a scan by blocks of 32 rows: the same device time; neither was kept.)

    python benchmarks/xla_segment_sum.py --device gpu
    git show 245d9bc:opbisect/patches/reductions.py > /tmp/before.py
    python benchmarks/xla_segment_sum.py --device gpu --before /tmp/before.py   # an earlier tree's forms beside
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CASES = {  # name: (rows, columns, segments, ids)
    "BERT-base word embedding (4096 x 768 into 30522, Zipf)": (4096, 768, 30522, "zipf"),
    "BERT-like tokens (2048 x 128 into 4000, Zipf, 1% of ids out of range)": (2048, 128, 4000, "dropped"),
    "BERT-like positions (2048 x 128 into 64)": (2048, 128, 64, "cycle"),
    "large table (65536 x 128 into 1M, Zipf)": (65536, 128, 1_000_000, "zipf"),
}


def _ids(rng, rows: int, segments: int, kind: str):
    if kind == "cycle":
        return np.arange(rows) % segments
    ids = np.minimum(rng.zipf(1.3, rows), segments) - 1
    if kind == "dropped":  # below and past the end: every form must drop them, as the op does
        out = rng.random(rows) < 0.01
        ids[out] = rng.choice([-1, segments], out.sum())
    return ids


def _before(path: str):
    """An earlier tree's reductions.py, loaded beside this one (its relative imports resolve in this package; its
    patches are not registered again, which the registry would refuse)."""
    import importlib.util
    from unittest import mock

    spec = importlib.util.spec_from_file_location("opbisect.patches._reductions_before", path)
    module = importlib.util.module_from_spec(spec)
    with mock.patch("opbisect.patches.registry.register", lambda *types, **how: lambda build: build):
        spec.loader.exec_module(module)
    return module


def _forms(module, num: int, label: str = ""):
    import tensorflow as tf

    return {f"the patch, scan{label}": tf.function(lambda r, i: module._scan_sum(r, i, num, xla=True),
                                                   jit_compile=True),
            f"the patch, fixed point{label}": tf.function(lambda r, i: module.fixed_point_sum(r, i, num),
                                                          jit_compile=True)}


def _variants(num: int, before=None):
    import tensorflow as tf

    from opbisect.patches import reductions

    atomic = tf.function(lambda r, i: tf.math.unsorted_segment_sum(r, i, num), jit_compile=True)
    return {"XLA's segment sum (atomic)": atomic, **_forms(reductions, num),
            **(_forms(before, num, ", before") if before else {})}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="gpu", choices=["gpu", "cpu"])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--before", help="an earlier tree's opbisect/patches/reductions.py: its forms beside")
    args = parser.parse_args(argv)

    import tensorflow as tf

    from benchmarks.device_profile import kernel_times

    before = _before(args.before) if args.before else None
    rng = np.random.default_rng(0)
    with tf.device("/GPU:0" if args.device == "gpu" else "/CPU:0"):
        for case, (n, width, num, kind) in CASES.items():
            ids = _ids(rng, n, num, kind).astype(np.int32)
            rows = rng.normal(size=(n, width)).astype(np.float32)
            exact = np.zeros((num, width))
            kept = (ids >= 0) & (ids < num)
            np.add.at(exact, ids[kept], rows[kept].astype(np.float64))
            r, i = tf.constant(rows), tf.constant(ids)
            print(f"{case}:")
            variants = _variants(num, before)
            for name, fn in variants.items():
                outs = [fn(r, i).numpy() for _ in range(20)]
                distinct = len({o.tobytes() for o in outs})
                table = kernel_times(lambda fn=fn, r=r, i=i: fn(r, i), calls=args.calls)
                print(f"  {name:36s} {table['us_per_call'].sum():9.1f} us a call on the device, "
                      f"{int(table['calls'].sum()) // args.calls} kernels, {distinct} distinct in 20, "
                      f"max |diff| vs float64 {np.abs(outs[0] - exact).max():.3g}, "
                      f"{int((outs[0] != exact.astype(np.float32)).sum())} not the float64 sum rounded")
                if name != next(iter(variants)):  # where the patch's device time goes
                    print(table.head(8).to_string(index=False))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main(sys.argv[1:]))
