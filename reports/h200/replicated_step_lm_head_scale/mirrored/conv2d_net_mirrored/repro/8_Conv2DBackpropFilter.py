"""Reproducer written by opbisect for gradient_tape/sequential_1/conv2d_1/convolution/Conv2DBackpropFilter (Conv2DBackpropFilter): source #8 of examples/conv2d_net_mirrored.py.

It runs the op alone 20 times on the inputs it had in the step (saved beside this file, 8_Conv2DBackpropFilter.npz), on
/job:localhost/replica:0/task:0/device:GPU:0, and prints how many distinct results it gave: exit 1 if they differ, 0 if not.
Needs only TensorFlow and NumPy:  python 8_Conv2DBackpropFilter.py
"""
import hashlib
import sys

import numpy as np
import tensorflow as tf

RUNS = 20
saved = np.load(__file__[:-3] + ".npz")

with tf.device('/job:localhost/replica:0/task:0/device:GPU:0'):
    args = dict(input=tf.constant(saved["in_0"]), filter_sizes=tf.constant(saved["in_1"]), out_backprop=tf.constant(saved["in_2"]), data_format='NHWC', dilations=[1, 1, 1, 1], explicit_paddings=[], padding='VALID', strides=[1, 1, 1, 1], use_cudnn_on_gpu=True)
    digests = set()
    for _ in range(RUNS):
        out = tf.raw_ops.Conv2DBackpropFilter(**args)
        results = [t.numpy() for t in tf.nest.flatten(out) if hasattr(t, "numpy")]
        h = hashlib.sha256()
        for a in results:
            h.update(a.dtype.str.encode() + str(a.shape).encode() + np.ascontiguousarray(a).tobytes())
        digests.add(h.hexdigest())
print(f"Conv2DBackpropFilter: {len(digests)} distinct results in {RUNS} runs on /job:localhost/replica:0/task:0/device:GPU:0")
sys.exit(1 if len(digests) > 1 else 0)
