"""Reproducer written by opbisect for gradient_tape/tf_bert_for_sequence_classification/bert/encoder/layer_._2/intermediate/dense/BiasAdd/BiasAddGrad (BiasAddGrad): source #63 of examples/seed_report.py.

It runs the op alone 20 times on the inputs it had in the step (saved beside this file, 63_BiasAddGrad.npz), on
/device:GPU:0, and prints how many distinct results it gave: exit 1 if they differ, 0 if not.
Needs only TensorFlow and NumPy:  python 63_BiasAddGrad.py
"""
import hashlib
import sys

import numpy as np
import tensorflow as tf

RUNS = 20
saved = np.load(__file__[:-3] + ".npz")

with tf.device('/device:GPU:0'):
    args = dict(out_backprop=tf.constant(saved["in_0"]), data_format='NHWC')
    digests = set()
    for _ in range(RUNS):
        out = tf.raw_ops.BiasAddGrad(**args)
        results = [t.numpy() for t in tf.nest.flatten(out) if hasattr(t, "numpy")]
        h = hashlib.sha256()
        for a in results:
            h.update(a.dtype.str.encode() + str(a.shape).encode() + np.ascontiguousarray(a).tobytes())
        digests.add(h.hexdigest())
print(f"BiasAddGrad: {len(digests)} distinct results in {RUNS} runs on /device:GPU:0")
sys.exit(1 if len(digests) > 1 else 0)
