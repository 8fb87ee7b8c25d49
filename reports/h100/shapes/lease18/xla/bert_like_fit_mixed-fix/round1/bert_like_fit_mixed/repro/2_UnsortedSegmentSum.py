"""Reproducer written by opbisect for cond/then_branch::cond/adam/UnsortedSegmentSum (UnsortedSegmentSum): source #2 of examples/bert_like_fit_mixed.py.

It runs the op alone 20 times on the inputs it had in the step (saved beside this file, 2_UnsortedSegmentSum.npz), on
/device:GPU:0, and prints how many distinct results it gave: exit 1 if they differ, 0 if not.
Needs only TensorFlow and NumPy:  python 2_UnsortedSegmentSum.py
"""
import hashlib
import sys

import numpy as np
import tensorflow as tf

RUNS = 20
saved = np.load(__file__[:-3] + ".npz")

with tf.device('/device:GPU:0'):
    args = dict(data=tf.constant(saved["in_0"]), segment_ids=tf.constant(saved["in_1"]), num_segments=tf.constant(saved["in_2"]))
    digests = set()
    for _ in range(RUNS):
        out = tf.raw_ops.UnsortedSegmentSum(**args)
        results = [t.numpy() for t in tf.nest.flatten(out) if hasattr(t, "numpy")]
        h = hashlib.sha256()
        for a in results:
            a = np.asarray(a)  # a string tensor's array holds pointers: its items are compared instead
            body = repr(a.tolist()).encode() if a.dtype == object else np.ascontiguousarray(a).tobytes()
            h.update(a.dtype.str.encode() + str(a.shape).encode() + body)
        digests.add(h.hexdigest())
print(f"UnsortedSegmentSum: {len(digests)} distinct results in {RUNS} runs on /device:GPU:0")
sys.exit(1 if len(digests) > 1 else 0)
