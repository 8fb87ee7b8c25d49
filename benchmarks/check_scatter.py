"""On the GPU: the scatter op (its `AddRuns`: four warps a tile of 32 sorted positions, heads and run ends by ballot,
a lane four columns at once) against the CPU kernel bit for bit, then its kernels' device time per
call against TensorFlow's atomic scatter (65,536 x 128 into 1M x 128)."""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.getcwd())
from benchmarks.device_profile import kernel_times  # noqa: E402
from opbisect import kernels  # noqa: E402
from opbisect.execute.prepared import setup_tensorflow  # noqa: E402
from opbisect.patches import PATCHES, PatchContext  # noqa: E402

tf, kind = setup_tensorflow(os.environ.get("CHECK_DEVICE", "gpu"))  # "cpu": a smoke run
start = time.perf_counter()
ops = kernels.load(cuda=kind == "gpu")
print(f"op library built and loaded in {time.perf_counter() - start:.1f} s")
rng = np.random.default_rng(0)
DEV = "/GPU:0" if kind == "gpu" else "/CPU:0"
n, rows = (65_536, 1_000_000) if kind == "gpu" else (4096, 20_000)
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


equal = 0
for dtype, width in ((tf.float32, 128), (tf.float16, 64), (tf.bfloat16, 200), (tf.float64, 7)):  # lanes' columns
    for name, keys in (("zipf", zipf), ("spread", spread), ("1000 keys", few), ("zipf, a tenth dropped", dropped)):
        table_rows = rows if name != "1000 keys" else 1000
        data = tf.cast(rng.standard_normal((n, width)) * 4, dtype)
        start = tf.cast(rng.standard_normal((table_rows, width)) * 50, dtype)
        keys64 = keys.astype(np.int64) if dtype == tf.float64 else keys  # int64 keys too
        same = scatter_on(DEV, start, keys64, data, dtype == tf.float16) == \
            scatter_on("/CPU:0", start, keys64, data, dtype == tf.float16)
        runs = len({scatter_on(DEV, start, keys64, data) for _ in range(5)})
        equal += same and runs == 1
        print(f"scatter {dtype.name} x {width} {name}: device and CPU kernels bitwise equal: {same}; distinct tables "
              f"in 5 device runs: {runs}")
print(f"{equal} of 16 cases bitwise equal to the CPU kernel and one table in 5 runs")

with tf.device(DEV):
    data = tf.constant(rng.standard_normal((n, 128)).astype(np.float32))
    table = tf.Variable(tf.zeros([rows, 128]))

    @tf.function
    def plain(v, i, u):
        tf.raw_ops.ResourceScatterAdd(resource=v.handle, indices=i, updates=u)

    ctx = PatchContext(op_type="ResourceScatterAdd", attrs={}, xla=False)
    patched = tf.function(lambda v, i, u: PATCHES["ResourceScatterAdd"].build(ctx, v.handle, i, u))
    for name, keys in (("zipf", zipf), ("spread", spread), ("1000 keys", few)):
        i = tf.constant(keys)
        for label, fn in (("plain", plain), ("patched", patched)):
            try:
                profile = kernel_times(lambda fn=fn, i=i: fn(table, i, data), calls=20)
            except Exception as exc:  # the profiler needs CUPTI on the machine
                print(f"profile {label}: {type(exc).__name__}: {exc}")
                break
            total = profile["us_per_call"].sum()
            print(f"profile {label} ({name} ids, 20 calls), device time per call {total:.1f} us:")
            print(profile.head(8).to_string(index=False))
