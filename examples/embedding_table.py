"""Shared by the large-table examples: a Keras Embedding(1M x 128) recommender-style step, on a GPU.

A batch of 1024 sequences of 64 ids (65,536 lookups) into a 1M-row table; the sparse gradient updates the table
with a GPU scatter (SGD: ResourceScatterSub; Adagrad: scatters into its accumulator too). Under
`enable_op_determinism()` a GPU scatter goes through the host: measured 1.28 -> 66 ms a step with SGD on an H200.
On a CPU the table has 100k rows, so the scripts run anywhere.
"""

import keras
import numpy as np
import tensorflow as tf

GPU = bool(tf.config.list_physical_devices("GPU"))
ROWS, DIM, BATCH, LENGTH = (1_000_000, 128, 1024, 64) if GPU else (100_000, 32, 256, 64)


def make(optimizer):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((LENGTH,), dtype="int32"), keras.layers.Embedding(ROWS, DIM),
                              keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)

    @tf.function
    def step(ids, clicks):
        with tf.GradientTape() as tape:
            loss = loss_fn(clicks, model(ids, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    rng = np.random.default_rng(0)
    # Zipf-like ids: popular rows repeat within a batch, as in real traffic
    ids = np.minimum(rng.zipf(1.2, (BATCH, LENGTH)) - 1, ROWS - 1)
    inputs = (tf.constant(ids, tf.int32), tf.constant(rng.integers(0, 2, (BATCH, 1)), tf.float32))
    return model, step, inputs
