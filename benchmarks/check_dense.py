"""On the GPU: opbisect's dense ops (opbisect/kernels/dense.h) against their CPU kernels and TensorFlow's own, and
their runs (20 calls, one result): the cross-entropy (the same order; exp and log may round apart on the two
machines), the column sum (bit for bit), the channels-first bias gradient's patch (one result, bit for bit, as near
the exact sum as the op's own kernel), and the resize gradient's own op (bit for bit, one result)."""

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
op = ops.opbisect_softmax_xent
print(f"op library built and loaded in {time.perf_counter() - start:.1f} s")
DEV = "/GPU:0" if kind == "gpu" else "/CPU:0"
rng = np.random.default_rng(0)
failed = 0
for n, c in ((2048, 8192), (64, 131072), (4096, 1000)):  # the CPU kernel runs on one thread
    for dtype in (tf.float32, tf.float16, tf.bfloat16):
        features = tf.cast(rng.standard_normal((n, c)).astype(np.float32) * 4, dtype)
        labels = rng.integers(0, c, n)
        with tf.device(DEV):
            runs = {b"".join(t.numpy().tobytes() for t in op(features, labels)) for _ in range(20)}
            loss, backprop = op(features, labels)
            plain_runs = {tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(features=features, labels=labels)[1]
                          .numpy().tobytes() for _ in range(5)}
            want_loss, want_backprop = tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(
                features=tf.cast(features, tf.float32), labels=labels)
        with tf.device("/CPU:0"):
            cpu_loss, cpu_backprop = op(features, labels)

        def gap(a, b):
            return float(np.max(np.abs(tf.cast(a, tf.float64).numpy() - tf.cast(b, tf.float64).numpy())))
        rel = {"float32": 1e-5, "float16": 2 ** -9, "bfloat16": 2 ** -6}[dtype.name]  # a few of the dtype's ulps
        top = float(np.max(np.abs(want_loss.numpy())))
        ok = len(runs) == 1 and gap(loss, want_loss) <= rel * top and gap(backprop, want_backprop) <= rel
        failed += not ok
        print(f"{n} x {c} {dtype.name:9s} runs {len(runs)} (op's own: {len(plain_runs)} in 5)  |loss - op's| "
              f"{gap(loss, want_loss):.2e}  |grad - op's| {gap(backprop, want_backprop):.2e}  |gpu - cpu| loss "
              f"{gap(loss, cpu_loss):.2e} grad {gap(backprop, cpu_backprop):.2e}  {'ok' if ok else 'FAILED'}")
for rows, cols in ((8192, 8192), (65536, 1024), (1000, 33)):
    for dtype in (tf.float32, tf.float16, tf.bfloat16):
        x = tf.cast(rng.standard_normal((rows, cols)).astype(np.float32), dtype)
        with tf.device(DEV):
            runs = {ops.opbisect_column_sum(x).numpy().tobytes() for _ in range(20)}
            plain_runs = {tf.raw_ops.BiasAddGrad(out_backprop=x).numpy().tobytes() for _ in range(5)}
            gpu = ops.opbisect_column_sum(x).numpy().tobytes()
        with tf.device("/CPU:0"):
            cpu = ops.opbisect_column_sum(x).numpy().tobytes()
        ok = len(runs) == 1 and gpu == cpu
        failed += not ok
        print(f"column sum {rows} x {cols} {dtype.name:9s} runs {len(runs)} (BiasAddGrad: {len(plain_runs)} in 5)  "
              f"gpu == cpu bit for bit: {gpu == cpu}  {'ok' if ok else 'FAILED'}")
# The channels-first bias gradient's patch (the own channel sum on a GPU): one result in 20 calls, and no
# farther from the exact sum (float64) than twice the op's own kernel, or a few of the dtype's ulps of the largest.
bias = PATCHES["BiasAddGrad"].build
nchw = PatchContext(op_type="BiasAddGrad", attrs={"data_format": "NCHW"}, xla=False, on_cpu=kind != "gpu")
for shape in ((32, 256, 56, 56), (8, 64, 7, 7)):
    exact = rng.standard_normal(shape)
    for dtype in (tf.float32, tf.float16, tf.bfloat16):
        x = tf.cast(exact, dtype)
        truth = tf.cast(x, tf.float64).numpy().sum(axis=(0, 2, 3))
        with tf.device(DEV):
            runs = {bias(nchw, x)[0].numpy().tobytes() for _ in range(20)}
            got = bias(nchw, x)[0]
            own = tf.raw_ops.BiasAddGrad(out_backprop=x, data_format="NCHW")
        with tf.device("/CPU:0"):  # the channel sum's CPU kernel, which adds in the GPU's order
            same = bias(nchw, x)[0].numpy().tobytes() == got.numpy().tobytes()
        err, own_err = (float(np.max(np.abs(tf.cast(t, tf.float64).numpy() - truth))) for t in (got, own))
        rel = {"float32": 1e-5, "float16": 2 ** -9, "bfloat16": 2 ** -6}[dtype.name]
        ok = len(runs) == 1 and same and err <= max(2 * own_err, rel * float(np.max(np.abs(truth))))
        failed += not ok
        print(f"bias gradient NCHW {shape} {dtype.name:9s} runs {len(runs)}  |patched - exact| {err:.2e}  "
              f"|BiasAddGrad - exact| {own_err:.2e}  gpu == cpu bit for bit: {same}  {'ok' if ok else 'FAILED'}")
# The resize gradient's own op: one result in 20 calls, the GPU's bits the CPU kernel's, near TensorFlow's kernel.
for (ih, iw), (oh, ow), c in (((56, 56), (112, 112), 64), ((224, 224), (112, 112), 3), ((7, 9), (20, 13), 5)):
    for align, half in ((False, True), (False, False), (True, False)):
        g = rng.standard_normal((8, oh, ow, c)).astype(np.float32)
        image = tf.zeros((8, ih, iw, c))
        flags = dict(align_corners=align, half_pixel_centers=half)
        with tf.device(DEV):
            runs = {ops.opbisect_resize_bilinear_grad(g, image, **flags).numpy().tobytes() for _ in range(20)}
            got = ops.opbisect_resize_bilinear_grad(g, image, **flags).numpy()
            plain_runs = {tf.raw_ops.ResizeBilinearGrad(grads=g, original_image=image, **flags).numpy().tobytes()
                          for _ in range(5)}
            want = tf.raw_ops.ResizeBilinearGrad(grads=g, original_image=image, **flags).numpy()
        with tf.device("/CPU:0"):
            cpu = ops.opbisect_resize_bilinear_grad(g, image, **flags).numpy()
            cpu_want = tf.raw_ops.ResizeBilinearGrad(grads=g, original_image=image, **flags).numpy()
        # Near TensorFlow's CPU kernel: its GPU kernel is itself about 4.6e-05 from the CPU's at 224 <- 112 with
        # corners aligned (an H100: the own op's GPU bits, which are its CPU bits, 4.55e-05 from the GPU kernel;
        # on the CPU the own op is 2.4e-07 from TensorFlow's kernel).
        gap, cpu_gap = float(np.max(np.abs(got - want))), float(np.max(np.abs(got - cpu_want)))
        same = got.tobytes() == cpu.tobytes()
        ok = len(runs) == 1 and same and cpu_gap <= 1e-5 * float(np.max(np.abs(cpu_want)))
        failed += not ok
        print(f"resize gradient {ih}x{iw} <- {oh}x{ow} x {c} align {align:d} half {half:d}  runs {len(runs)} (the "
              f"op's: {len(plain_runs)} in 5)  gpu == cpu bit for bit: {same}  |own - op's| "
              f"{gap:.2e}  |own - CPU kernel's| {cpu_gap:.2e}  {'ok' if ok else 'FAILED'}")
sys.exit(1 if failed else 0)
