"""Session 11, on the GPU: opbisect's scatter op (`OpbisectScatterCombine`, opbisect/kernels/combine.h) against its
CPU kernel bit for bit and over 20 runs, then the scatter patch timed op alone, side by side with the plain op and
with session 10's form (the combine, then gather, add and write), and each form's kernels from the profiler."""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.getcwd())
from benchmarks.device_profile import kernel_times  # noqa: E402
from opbisect import kernels  # noqa: E402
from opbisect.patches import PATCHES, PatchContext  # noqa: E402
from opbisect.session import setup_tensorflow  # noqa: E402

tf, kind = setup_tensorflow(os.environ.get("CHECK_DEVICE", "gpu"))  # "cpu": a smoke run
start = time.perf_counter()
ops = kernels.load(cuda=kind == "gpu")
print(f"op library built and loaded in {time.perf_counter() - start:.1f} s")
rng = np.random.default_rng(0)
DEV = "/GPU:0" if kind == "gpu" else "/CPU:0"
n, rows, width = (65_536, 1_000_000, 128) if kind == "gpu" else (4096, 20_000, 16)
zipf = np.minimum(rng.zipf(1.2, n) - 1, rows - 1).astype(np.int32)  # skewed: row 0 holds about a fifth
spread = rng.integers(0, rows, n).astype(np.int32)  # an embedding's batch: few duplicates
few = rng.integers(0, 1000, n).astype(np.int32)  # many duplicates
dropped = zipf.copy()  # zipf, with a tenth of the ids out of range (dropped; they sort last)
dropped[rng.choice(n, n // 10, replace=False)] = rng.choice([-3, rows, rows + 7], n // 10)


def scatter_on(device, start, keys, data, subtract=False):
    with tf.device(device):
        table = tf.Variable(start)
        ops.opbisect_scatter_combine(resource=table.handle, keys=tf.constant(keys), rows=tf.identity(data),
                                     subtract=subtract)
        return table.numpy().tobytes()


for dtype in (tf.float32, tf.float16, tf.bfloat16, tf.float64):
    for name, keys in (("zipf", zipf), ("spread", spread), ("1000 keys", few), ("zipf, a tenth dropped", dropped)):
        data = tf.cast(rng.standard_normal((n, width)) * 4, dtype)
        start = tf.cast(rng.standard_normal((rows if name != "1000 keys" else 1000, width)) * 50, dtype)
        keys64 = keys.astype(np.int64) if dtype == tf.float64 else keys  # int64 keys too
        same = scatter_on(DEV, start, keys64, data, dtype == tf.float16) == \
            scatter_on("/CPU:0", start, keys64, data, dtype == tf.float16)
        count = 20 if dtype == tf.float32 else 5
        runs = len({scatter_on(DEV, start, keys64, data) for _ in range(count)})
        print(f"scatter {dtype.name} {name}: device and CPU kernels bitwise equal: {same}; distinct tables in {count} "
              f"device runs: {runs}")

with tf.device(DEV):
    v = tf.Variable(tf.zeros([4, 2]))
    ops.opbisect_scatter_combine(resource=v.handle, keys=tf.constant([-1, 1, 4, 1]), rows=tf.ones([4, 2]))
    print("keys out of range dropped:", v.numpy().tolist() == [[0, 0], [2, 2], [0, 0], [0, 0]])
    before = v.read_value()
    ops.opbisect_scatter_combine(resource=v.handle, keys=tf.constant([0]), rows=tf.ones([1, 2]))
    print("a tensor read before keeps its values:", before.numpy()[0].tolist() == [0, 0])

    data = tf.constant(rng.standard_normal((n, width)).astype(np.float32))

    @tf.function
    def plain(v, i, u):
        tf.raw_ops.ResourceScatterAdd(resource=v.handle, indices=i, updates=u)

    @tf.function
    def session10(v, i, u):  # the combine, then gather, add, write (session 10's scatter patch)
        distinct, sums = ops.opbisect_combine(tf.where((i >= 0) & (i < rows), i, -1), u, -1)
        old = tf.raw_ops.ResourceGather(resource=v.handle, indices=distinct, dtype=u.dtype)
        tf.raw_ops.ResourceScatterUpdate(resource=v.handle, indices=distinct, updates=old + sums)

    def patch(**kw):
        ctx = PatchContext(op_type="ResourceScatterAdd", attrs={}, xla=False, **kw)
        return tf.function(lambda v, i, u: PATCHES["ResourceScatterAdd"].build(ctx, v.handle, i, u))

    variants = {"plain": plain, "fused (now)": patch(), "session 10": session10}  # TF's sort kernels: in check/
    if kind != "gpu":  # the smoke run: session 10's gather and write of index -1 need a GPU's kernels
        variants.pop("session 10")
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
        for _ in range(40 if kind == "gpu" else 10):
            for label, fn in variants.items():
                tf.test.experimental.sync_devices()
                t0 = time.perf_counter()
                fn(table, i, data)
                tf.test.experimental.sync_devices()
                times[label].append(time.perf_counter() - t0)
        ms = {k: np.median(v[len(v) // 6:]) * 1e3 for k, v in times.items()}
        print(f"scatter of {n} x {width} ({name}) into {rows} x {width}: " + ", ".join(
            f"{k} {m:.3f} ms ({m / ms['plain']:.2f}x)" for k, m in ms.items()))

    i = tf.constant(zipf)
    for label, fn in variants.items():
        try:
            profile = kernel_times(lambda fn=fn: fn(table, i, data), calls=20)
        except Exception as exc:  # the profiler needs CUPTI on the machine
            print(f"profile {label}: {type(exc).__name__}: {exc}")
            break
        print(f"profile {label} (zipf ids, 20 calls), device time per call {profile['us_per_call'].sum():.1f} us:")
        print(profile.head(14).to_string(index=False))
