"""A raw `scatter_add` of 65,536 rows into a 1M x 128 variable (100k x 32 on a CPU), the ids Zipf-distributed so
that rows repeat: the GPU scatter adds repeated rows with atomics, in another order in every run.

Run: opbisect trace examples/scatter_add_table.py
"""

import numpy as np
import tensorflow as tf

GPU = bool(tf.config.list_physical_devices("GPU"))
ROWS, DIM, UPDATES = (1_000_000, 128, 65_536) if GPU else (100_000, 32, 65_536)
rng = np.random.default_rng(0)
table = tf.Variable(tf.zeros([ROWS, DIM]), name="table")


@tf.function
def step(ids, updates):
    table.scatter_add(tf.IndexedSlices(updates, ids))
    return tf.reduce_sum(table[:8])


inputs = (tf.constant(np.minimum(rng.zipf(1.2, UPDATES) - 1, ROWS - 1), tf.int32),
          tf.constant(rng.standard_normal((UPDATES, DIM)).astype(np.float32)))
