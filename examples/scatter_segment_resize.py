"""One step through each GPU op that sums with atomics: unsorted_segment_sum, segment_sum, tensor_scatter_nd_add,
a ResourceScatterAdd (a variable's scatter_add) on duplicated indices, and the gradient of a bilinear
tf.image.resize (ResizeBilinearGrad). On a GPU each is its own source; on CPU most are deterministic.

Run: opbisect trace examples/scatter_segment_resize.py
"""

import numpy as np
import tensorflow as tf

ROWS, WIDTH, SEGMENTS = 65536, 64, 32
rng = np.random.default_rng(0)
values = tf.constant(rng.standard_normal((ROWS, WIDTH)).astype(np.float32))
ids = tf.constant(rng.integers(0, SEGMENTS, ROWS).astype(np.int32))  # every id repeats ~2000 times
sorted_ids = tf.sort(ids)
image = tf.constant(rng.standard_normal((8, 32, 32, 16)).astype(np.float32))
upstream = tf.constant(rng.standard_normal((8, 96, 96, 16)).astype(np.float32))
table = tf.Variable(tf.zeros([SEGMENTS, WIDTH]), name="table")


@tf.function
def step(values, ids, sorted_ids, image, upstream):
    unsorted = tf.math.unsorted_segment_sum(values, ids, SEGMENTS, name="unsorted_segment_sum")
    segmented = tf.math.segment_sum(values, sorted_ids, name="segment_sum")
    scattered = tf.tensor_scatter_nd_add(tf.zeros([SEGMENTS, WIDTH]), ids[:, None], values, name="tensor_scatter_add")
    table.scatter_add(tf.IndexedSlices(values, ids))
    with tf.GradientTape() as tape:
        tape.watch(image)
        resized = tf.image.resize(image, [96, 96], method="bilinear")
    image_grad = tape.gradient(resized, image, output_gradients=upstream)
    return (tf.reduce_sum(unsorted), tf.reduce_sum(segmented), tf.reduce_sum(scattered),
            tf.reduce_sum(image_grad))


inputs = (values, ids, sorted_ids, image, upstream)
