"""A Keras Embedding + Dense classifier trained with SGD on a batch with heavy index duplication.

Really nondeterministic on CPU: SGD updates the embedding table with one ResourceScatterSub over 32768 rows that
hit only 16 distinct indices, and TensorFlow's CPU scatter adds duplicates from several threads. The scatter is
large so that both threads are busy at once even on a loaded 2-core machine: with 8192 rows and two busy loops
beside it, 6 runs came out identical in 3 of 3 tries; with 32768 rows they differed in 3 of 3.
Run: opbisect trace examples/embedding_sgd.py
"""

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(0)
VOCAB, DIM, BATCH, LENGTH, CLASSES = 1000, 32, 2048, 16, 4

model = keras.Sequential([
    keras.Input((LENGTH,), dtype="int32"),
    keras.layers.Embedding(VOCAB, DIM),
    keras.layers.GlobalAveragePooling1D(),
    keras.layers.Dense(CLASSES),
])
optimizer = keras.optimizers.SGD(learning_rate=0.1)
optimizer.build(model.trainable_variables)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@tf.function
def step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


rng = np.random.default_rng(0)
inputs = (
    tf.constant(rng.integers(0, 16, (BATCH, LENGTH)), tf.int32),  # 32768 lookups of 16 rows: heavy duplication
    tf.constant(rng.integers(0, CLASSES, (BATCH,)), tf.int32),
)
