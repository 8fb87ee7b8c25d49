"""On the GPU: the fused op's CUDA kernel gives the same digests as its CPU kernel and as the weighted sum in
TensorFlow ops, on every dtype and on sizes around its block and batch boundaries, in every repetition."""

import os
import sys

import numpy as np

sys.path.insert(0, os.getcwd())
from opbisect.capture import fingerprint  # noqa: E402
from opbisect.execute.prepared import setup_tensorflow  # noqa: E402

tf, kind = setup_tensorflow("gpu")
gpu = fingerprint.FusedFingerprinter(cuda=True)
rng = np.random.default_rng(0)
sizes = [0, 1, 7, 255, 256, 8191, 8192, 8193, 100_003, 3_000_001]
tensors = [tf.constant(rng.standard_normal(n).astype(np.float32)) for n in sizes]
tensors += [tf.constant(rng.integers(-2**62, 2**62, 9000), tf.int64),
            tf.constant(rng.standard_normal(9000), tf.float16),
            tf.constant(rng.standard_normal(9000), tf.bfloat16), tf.constant(rng.integers(0, 2, 9000).astype(bool)),
            tf.constant(rng.integers(0, 255, 9000).astype(np.uint8)), tf.constant(rng.standard_normal(9000)),
            tf.constant(rng.standard_normal(500) + 1j, tf.complex128), tf.constant([3, -4, 5], tf.int32)]
tensors = tensors * 13  # more than one launch batch (96 tensors)
with tf.device("/GPU:0"):
    on_gpu = [tf.identity(t) for t in tensors]
    got = [gpu.many(on_gpu).numpy() for _ in range(20)]
    ops = tf.function(lambda ts: fingerprint.WeightedSumFingerprinter().many(list(ts)))(on_gpu).numpy()
with tf.device("/CPU:0"):
    cpu = gpu.module.opbisect_fingerprint([tf.identity(t) for t in tensors]).numpy()
same_runs = all(np.array_equal(g, got[0]) for g in got)
print(f"{len(tensors)} tensors, {sum(int(t.shape.num_elements()) for t in tensors)} elements")
print("GPU kernel identical in 20 repetitions:", same_runs)
print("GPU kernel == CPU kernel:", np.array_equal(got[0], cpu))
print("GPU kernel == TF-ops weighted sum (on GPU):", np.array_equal(got[0], ops))
print("PASS" if same_runs and np.array_equal(got[0], cpu) and np.array_equal(got[0], ops) else "FAIL")
