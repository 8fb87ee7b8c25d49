"""Gradient accumulation in a `tf.while_loop`: the racy op sits inside the loop body.

Users emulate a large batch by accumulating gradients over micro-batches in a loop. Here the Embedding's sparse
gradient is accumulated with `Variable.scatter_add` (ResourceScatterAdd): 16 distinct tokens looked up 32768 times
per micro-batch, so CPU threads add duplicate rows in a racing order. opbisect enters the While and names the
scatter inside `while/body`, with the first iteration at which it differs.

Run: opbisect trace examples/grad_accumulation.py
"""

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(0)
VOCAB, DIM, MICRO, N_MICRO, LENGTH, CLASSES = 1000, 128, 2048, 4, 16, 4

model = keras.Sequential([
    keras.Input((LENGTH,), dtype="int32"),
    keras.layers.Embedding(VOCAB, DIM),
    keras.layers.GlobalAveragePooling1D(),
    keras.layers.Dense(CLASSES),
])
optimizer = keras.optimizers.SGD(learning_rate=0.1)
optimizer.build(model.trainable_variables)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
accumulators = [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False, name=f"accum_{i}")
                for i, v in enumerate(model.trainable_variables)]


@tf.function
def step(x, y):
    for a in accumulators:
        a.assign(tf.zeros_like(a))

    def body(i, loss_sum):
        xb, yb = x[i * MICRO:(i + 1) * MICRO], y[i * MICRO:(i + 1) * MICRO]
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        for a, g in zip(accumulators, tape.gradient(loss, model.trainable_variables)):
            if isinstance(g, tf.IndexedSlices):
                a.scatter_add(g)  # ResourceScatterAdd with duplicate rows: races on CPU threads
            else:
                a.assign_add(g)
        return i + 1, loss_sum + loss

    _, total = tf.while_loop(lambda i, _: i < N_MICRO, body, (tf.constant(0), tf.constant(0.0)))
    optimizer.apply_gradients(zip([a / N_MICRO for a in accumulators], model.trainable_variables))
    return total / N_MICRO


rng = np.random.default_rng(0)
inputs = (tf.constant(rng.integers(0, 16, (MICRO * N_MICRO, LENGTH)), tf.int32),
          tf.constant(rng.integers(0, CLASSES, (MICRO * N_MICRO,)), tf.int32))
