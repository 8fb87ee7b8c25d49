"""On the GPU: the sort-based kernels the segment-sum and scatter patches use (SparseSegmentSumGrad and
SparseSegmentSumGradV2) give the same bits in every run where the plain ops race, handle no input and ids out of
range as the patches need, and what the combine costs against the plain scatter, op alone, side by side."""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.getcwd())
from opbisect.patches import PATCHES, PatchContext  # noqa: E402
from opbisect.session import setup_tensorflow  # noqa: E402

tf, kind = setup_tensorflow(os.environ.get("CHECK_DEVICE", "gpu"))  # "cpu": a smoke run
rng = np.random.default_rng(0)
GPU = PatchContext(op_type="", attrs={}, xla=False, on_cpu=False)


def distinct(fn, runs=20):
    return len({fn().numpy().tobytes() for _ in range(runs)})


with tf.device("/GPU:0" if kind == "gpu" else "/CPU:0"):
    n, rows, width = (65_536, 1_000_000, 128) if kind == "gpu" else (4096, 20_000, 16)
    ids = tf.constant(rng.integers(0, 1000, n), tf.int32)  # 65k updates into 1000 rows: many duplicates
    data = tf.constant(rng.standard_normal((n, width)).astype(np.float32))
    seg = tf.range(n)
    print("plain UnsortedSegmentSum distinct/20:", distinct(lambda: tf.math.unsorted_segment_sum(data, ids, 1000)))
    print("SparseSegmentSumGrad distinct/20:", distinct(
        lambda: tf.raw_ops.SparseSegmentSumGrad(grad=data, indices=ids, segment_ids=seg, output_dim0=1000)))
    print("SparseSegmentSumGradV2 distinct/20:", distinct(
        lambda: tf.raw_ops.SparseSegmentSumGradV2(grad=data, indices=ids, segment_ids=seg, dense_output_dim0=1000)[0]))
    patch = tf.function(lambda d, i: PATCHES["UnsortedSegmentSum"].build(GPU, d, i, tf.constant(1000))[0])
    print("patched UnsortedSegmentSum distinct/20:", distinct(lambda: patch(data, ids)))
    want = tf.math.unsorted_segment_sum(tf.cast(data, tf.float64), ids, 1000)
    error = lambda x: float(tf.reduce_max(tf.abs(tf.cast(x, tf.float64) - want)))  # noqa: E731
    print("max abs difference from the float64 sum: patched", error(patch(data, ids)),
          "plain", error(tf.math.unsorted_segment_sum(data, ids, 1000)))
    empty = tf.zeros([0, width])
    print("SparseSegmentSumGrad on no input, all zero:", not tf.raw_ops.SparseSegmentSumGrad(
        grad=empty, indices=tf.zeros([0], tf.int32), segment_ids=tf.zeros([0], tf.int32), output_dim0=5).numpy().any())
    bad = tf.constant([-3, 0, 7, 2, 5, 2])
    small = tf.constant(rng.integers(-8, 9, (6, 2)).astype(np.float32))
    got = tf.function(lambda d, i: PATCHES["UnsortedSegmentSum"].build(GPU, d, i, tf.constant(5))[0])(small, bad)
    ref = np.zeros((5, 2), np.float32)
    np.add.at(ref, [0, 2, 2], small.numpy()[[1, 3, 5]])
    print("ids out of range dropped:", np.array_equal(got.numpy(), ref))

    def scatter_runs(build, runs=20):
        outs = set()
        for _ in range(runs):
            v = tf.Variable(tf.zeros([rows, width]))
            build(v, ids, data)
            outs.add(v.read_value()[:1000].numpy().tobytes())  # the ids name rows 0-999 only
            del v
        return len(outs)

    @tf.function
    def plain(v, i, u):
        tf.raw_ops.ResourceScatterAdd(resource=v.handle, indices=i, updates=u)

    ctx = PatchContext(op_type="ResourceScatterAdd", attrs={}, xla=False, on_cpu=False)
    @tf.function
    def ours(v, i, u):
        PATCHES["ResourceScatterAdd"].build(ctx, v.handle, i, u)

    print("plain ResourceScatterAdd distinct/20:", scatter_runs(plain))
    print("patched ResourceScatterAdd distinct/20:", scatter_runs(ours))
    table = tf.Variable(tf.zeros([rows, width]))
    spread = tf.constant(rng.integers(0, rows, n), tf.int32)  # an embedding's batch: few duplicates
    zipf = tf.constant(np.minimum(rng.zipf(1.2, n) - 1, rows - 1), tf.int32)  # skewed: row 0 holds about a fifth (18%)
    for name, i in (("zipf ids", zipf),):  # the table starts at 1: rounding in the update shows
        exact = tf.math.unsorted_segment_sum(tf.cast(data, tf.float64), i, rows) + 1.0
        for label, fn in (("plain", plain), ("patched", ours)):
            v = tf.Variable(tf.ones([rows, width]))
            fn(v, i, data)
            print(f"{label} scatter ({name}), max abs difference from the float64 result:",
                  float(tf.reduce_max(tf.abs(tf.cast(v, tf.float64) - exact))))
            del v
    @tf.function
    def one_call(v, i, u):  # the floor: one SparseSegmentSumGradV2 (its sort, its wait for the count), one write
        sums, distinct = tf.raw_ops.SparseSegmentSumGradV2(grad=u, indices=i, segment_ids=tf.range(tf.size(i)),
                                                           dense_output_dim0=rows)
        tf.raw_ops.ResourceScatterAdd(resource=v.handle, indices=distinct, updates=sums)

    for name, i in (("1000 distinct rows", ids), (f"ids over {rows} rows", spread), ("zipf ids", zipf)):
        times = {"plain": [], "patched": [], "one call": []}
        for _ in range(60 if kind == "gpu" else 12):
            for label, fn in (("plain", plain), ("patched", ours), ("one call", one_call)):
                tf.test.experimental.sync_devices()
                start = time.perf_counter()
                fn(table, i, data)
                tf.test.experimental.sync_devices()
                times[label].append(time.perf_counter() - start)
        p, q, f = (np.median(times[k][len(times[k]) // 6:]) * 1e3 for k in ("plain", "patched", "one call"))
        print(f"scatter of {n} x {width} ({name}) into {rows} x {width}: plain {p:.3f} ms, patched {q:.3f} ms "
              f"(ratio {q / p:.2f}), one SparseSegmentSumGradV2 and the write {f:.3f} ms")
