"""Reproducer written by opbisect for while/body::while/ResourceScatterAdd (ResourceScatterAdd): source #1 of examples/grad_accumulation.py.

It runs the op alone 20 times on the inputs it had in the step (saved beside this file, 1_ResourceScatterAdd.npz), on
/device:CPU:0, and prints how many distinct results it gave: exit 1 if they differ, 0 if not.
Needs only TensorFlow and NumPy:  python 1_ResourceScatterAdd.py
"""
import hashlib
import sys

import numpy as np
import tensorflow as tf

RUNS = 20
saved = np.load(__file__[:-3] + ".npz")

with tf.device('/device:CPU:0'):
    var_state_0 = tf.Variable(saved["state_0"])  # `accum_0` right before the op
    args = dict(resource=var_state_0.handle, indices=tf.constant(saved["in_0"]), updates=tf.constant(saved["in_1"]))
    digests = set()
    for _ in range(RUNS):
        var_state_0.assign(saved["state_0"])
        out = tf.raw_ops.ResourceScatterAdd(**args)
        results = [t.numpy() for t in tf.nest.flatten(out) if hasattr(t, "numpy")] + [var_state_0.numpy()]
        h = hashlib.sha256()
        for a in results:
            h.update(a.dtype.str.encode() + str(a.shape).encode() + np.ascontiguousarray(a).tobytes())
        digests.add(h.hexdigest())
print(f"ResourceScatterAdd: {len(digests)} distinct results in {RUNS} runs on /device:CPU:0")
sys.exit(1 if len(digests) > 1 else 0)
