"""On the GPU: opbisect's combine and segment-sum ops (opbisect/kernels/combine.h) against their CPU kernels bit
for bit, their runs, the GPU scatter's treatment of index -1 (the padding the patches write there), and the
patches built on them timed op alone, side by side with the plain op and with TensorFlow's sort-based kernels
(an earlier patch form)."""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.getcwd())
from opbisect import kernels  # noqa: E402
from opbisect.execute.prepared import setup_tensorflow  # noqa: E402
from opbisect.patches import PATCHES, PatchContext  # noqa: E402

tf, kind = setup_tensorflow(os.environ.get("CHECK_DEVICE", "gpu"))  # "cpu": a smoke run
start = time.perf_counter()
ops = kernels.load(cuda=kind == "gpu")
op = ops.opbisect_combine
print(f"op library built and loaded in {time.perf_counter() - start:.1f} s")
rng = np.random.default_rng(0)
DEV = "/GPU:0" if kind == "gpu" else "/CPU:0"
n, rows, width = (65_536, 1_000_000, 128) if kind == "gpu" else (4096, 20_000, 16)
zipf = np.minimum(rng.zipf(1.2, n) - 1, rows - 1).astype(np.int32)  # skewed: row 0 holds about a fifth
spread = rng.integers(0, rows, n).astype(np.int32)  # an embedding's batch: few duplicates
few = rng.integers(0, 1000, n).astype(np.int32)  # many duplicates


def combine_on(device, keys, data):
    with tf.device(device):
        d, s = op(tf.constant(keys), tf.identity(data), np.int32(-1))
        return d.numpy(), s.numpy()


for dtype in (tf.float32, tf.float16, tf.bfloat16, tf.float64):
    for name, keys in (("zipf", zipf), ("spread", spread), ("1000 keys", few)):
        data = tf.cast(rng.standard_normal((n, width)) * 4, dtype)
        gpu = combine_on(DEV, keys, data)
        cpu = combine_on("/CPU:0", keys, data)
        same = gpu[0].tobytes() == cpu[0].tobytes() and gpu[1].tobytes() == cpu[1].tobytes()
        runs = len({combine_on(DEV, keys, data)[1].tobytes() for _ in range(20)})
        print(f"combine {dtype.name} {name}: device and CPU kernels bitwise equal: {same}; distinct sums in 20 device "
              f"runs: {runs}; {len(np.unique(keys))} distinct keys")


def segment_sum_on(device, keys, data, segments):
    with tf.device(device):
        return ops.opbisect_segment_sum(tf.constant(keys), tf.identity(data), segments).numpy()


def check_segment_sums(key_sets, width, segments, dtypes=(tf.float32, tf.float16, tf.bfloat16, tf.float64)):
    for dtype in dtypes:
        for name, keys in key_sets:
            data = tf.cast(rng.standard_normal((len(keys), width)) * 4, dtype)
            keys = np.where(keys < segments, keys, -1)  # the rest dropped (as out of range)
            gpu = segment_sum_on(DEV, keys, data, segments)
            same = gpu.tobytes() == segment_sum_on("/CPU:0", keys, data, segments).tobytes()
            runs = len({segment_sum_on(DEV, keys, data, segments).tobytes() for _ in range(20)})
            print(f"segment sum {dtype.name} {name} ({len(keys)} x {width}): device and CPU kernels bitwise equal: "
                  f"{same}; distinct outputs in 20 device runs: {runs}")


check_segment_sums((("zipf", zipf), ("spread", spread), ("1000 keys", few)), width, 50_000)
# Few ids of wide rows (BERT's word embedding: 4,096 of 768 into 30,522), where AddRuns' launch takes another shape
# and one block sorts the ids (up to 8,192 of them; 8,193 take CUB's device sort); "some dropped": int64 ids, some
# past the table (-1 here), which the sort clamps to its row count.
for few_ids in (4096, 8192, 8193) if kind == "gpu" else (512,):
    check_segment_sums((("zipf", np.minimum(rng.zipf(1.2, few_ids) - 1, 30_521).astype(np.int32)),
                        ("spread", rng.integers(0, 30_522, few_ids).astype(np.int32)),
                        ("some dropped", rng.integers(0, 40_000, few_ids).astype(np.int64))), 768, 30_522,
                       (tf.float32, tf.bfloat16))

with tf.device(DEV):
    v = tf.Variable(tf.zeros([5, 2]))
    if kind == "gpu":  # a CPU's scatter raises on it
        tf.raw_ops.ResourceScatterAdd(resource=v.handle, indices=tf.constant([-1, 1, -1]), updates=tf.ones([3, 2]))
        want = [[0, 0], [1, 1], [0, 0], [0, 0], [0, 0]]
        print("GPU ResourceScatterAdd ignores index -1:", v.numpy().tolist() == want)
        got = tf.raw_ops.ResourceGather(resource=v.handle, indices=tf.constant([-1, 1]), dtype=tf.float32)
        print("GPU ResourceGather reads zeros at index -1:", got.numpy().tolist() == [[0, 0], [1, 1]])
        tf.raw_ops.ResourceScatterUpdate(resource=v.handle, indices=tf.constant([-1, 2]), updates=tf.ones([2, 2]) * 5)
        print("GPU ResourceScatterUpdate ignores index -1:", v.numpy()[[0, 2, 3]].tolist() == [[0, 0], [5, 5], [0, 0]])
        got = tf.tensor_scatter_nd_update(tf.zeros([3, 2]), tf.constant([[-1], [1]]), tf.ones([2, 2]))
        print("GPU TensorScatterUpdate ignores index -1:", got.numpy().tolist() == [[0, 0], [1, 1], [0, 0]])

    data = tf.constant(rng.standard_normal((n, width)).astype(np.float32))
    forms = {"combine": PatchContext(op_type="ResourceScatterAdd", attrs={}, xla=False),
             "sorted": PatchContext(op_type="ResourceScatterAdd", attrs={}, xla=False, own_kernels=False)}
    if kind != "gpu":  # the smoke run: the combine's padding goes to index -1, which a CPU's scatter refuses
        forms.pop("combine")

    @tf.function
    def plain(v, i, u):
        tf.raw_ops.ResourceScatterAdd(resource=v.handle, indices=i, updates=u)

    def scatter_patch(ctx):
        return tf.function(lambda v, i, u: PATCHES["ResourceScatterAdd"].build(ctx, v.handle, i, u))

    def segment_patch(ctx):
        ctx = PatchContext("UnsortedSegmentSum", {}, False, own_kernels=ctx.own_kernels)
        return tf.function(lambda d, i: PATCHES["UnsortedSegmentSum"].build(ctx, d, i, tf.constant(1000))[0])

    patched = {form: scatter_patch(ctx) for form, ctx in forms.items()}
    variants = {"plain": plain, **patched}
    if kind == "gpu":
        @tf.function
        def combine_atomic(v, i, u):  # the combine, then the atomic scatter of the distinct rows
            distinct, sums = op(tf.where((i >= 0) & (i < rows), i, -1), u, -1)
            tf.raw_ops.ResourceScatterAdd(resource=v.handle, indices=distinct, updates=sums)

        variants["combine, atomic write"] = combine_atomic
    for name, keys in (("zipf", zipf), ("spread", spread)):
        i = tf.constant(keys)
        exact = tf.math.unsorted_segment_sum(tf.cast(data, tf.float64), i, rows) + 1.0
        for label, fn in variants.items():
            outs, error = set(), None
            for _ in range(10):
                t = tf.Variable(tf.ones([rows, width]))
                fn(t, i, data)
                outs.add(t.numpy().tobytes())
                error = float(tf.reduce_max(tf.abs(tf.cast(t, tf.float64) - exact)))
                del t
            print(f"scatter {label} ({name} ids): distinct tables in 10 runs {len(outs)}, max abs difference "
                  f"from float64 {error:.2e}")

    table = tf.Variable(tf.zeros([rows, width]))
    for name, keys in (("1000 distinct rows", few), (f"ids over {rows} rows", spread), ("zipf ids", zipf)):
        i = tf.constant(keys)
        times = {label: [] for label in variants}
        for _ in range(60 if kind == "gpu" else 10):
            for label, fn in variants.items():
                tf.test.experimental.sync_devices()
                t0 = time.perf_counter()
                fn(table, i, data)
                tf.test.experimental.sync_devices()
                times[label].append(time.perf_counter() - t0)
        ms = {k: np.median(v[len(v) // 6:]) * 1e3 for k, v in times.items()}
        print(f"scatter of {n} x {width} ({name}) into {rows} x {width}: " + ", ".join(
            f"{k} {m:.3f} ms ({m / ms['plain']:.2f}x)" for k, m in ms.items()))

    segment = {form: segment_patch(ctx) for form, ctx in forms.items()}
    sums = {"plain": tf.function(lambda d, i: tf.math.unsorted_segment_sum(d, i, 1000)), **segment}
    if kind == "gpu":
        @tf.function
        def combine_update(d, i):  # the combine, then the distinct sums written into zeros with plain stores
            distinct, total = op(i, d, -1)
            return tf.tensor_scatter_nd_update(tf.zeros([1000, width]), distinct[:, None], total)

        sums["combine, update write"] = combine_update

        @tf.function
        def combine_atomic_sum(d, i):  # the patch until session 46: the combine, then TF's segment sum of its rows
            distinct, total = op(i, d, -1)
            return tf.math.unsorted_segment_sum(total, distinct, 1000)

        sums["combine, then segment sum"] = combine_atomic_sum
    i = tf.constant(few)
    for label, fn in sums.items():
        print(f"UnsortedSegmentSum {label} (1000 segments): distinct in 20 runs",
              len({fn(data, i).numpy().tobytes() for _ in range(20)}))
    times = {label: [] for label in sums}
    for _ in range(60 if kind == "gpu" else 10):
        for label, fn in sums.items():
            tf.test.experimental.sync_devices()
            t0 = time.perf_counter()
            fn(data, i)
            tf.test.experimental.sync_devices()
            times[label].append(time.perf_counter() - t0)
    ms = {k: np.median(v[len(v) // 6:]) * 1e3 for k, v in times.items()}
    print(f"UnsortedSegmentSum of {n} x {width} into 1000: " + ", ".join(
        f"{k} {m:.3f} ms ({m / ms['plain']:.2f}x)" for k, m in ms.items()))
