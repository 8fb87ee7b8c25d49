"""Reproducer written by opbisect for sgd/ResourceScatterSub (ResourceScatterSub): source #1 of examples/fit_epochs.py.

It runs the op alone 20 times on the inputs it had in the step (saved beside this file, 1_ResourceScatterSub.npz), on
/device:CPU:0, and prints how many distinct results it gave: exit 1 if they differ, 0 if not.
Needs only TensorFlow and NumPy:  python 1_ResourceScatterSub.py
"""
import hashlib
import sys

import numpy as np
import tensorflow as tf

RUNS = 20
saved = np.load(__file__[:-3] + ".npz")

with tf.device('/device:CPU:0'):
    var_state_0 = tf.Variable(saved["state_0"])  # `sequential/embedding/embeddings` right before the op
    args = dict(resource=var_state_0.handle, indices=tf.constant(saved["in_0"]), updates=tf.constant(saved["in_1"]))
    digests = set()
    for _ in range(RUNS):
        var_state_0.assign(saved["state_0"])
        out = tf.raw_ops.ResourceScatterSub(**args)
        results = [t.numpy() for t in tf.nest.flatten(out) if hasattr(t, "numpy")] + [var_state_0.numpy()]
        h = hashlib.sha256()
        for a in results:
            h.update(a.dtype.str.encode() + str(a.shape).encode() + np.ascontiguousarray(a).tobytes())
        digests.add(h.hexdigest())
print(f"ResourceScatterSub: {len(digests)} distinct results in {RUNS} runs on /device:CPU:0")
sys.exit(1 if len(digests) > 1 else 0)
