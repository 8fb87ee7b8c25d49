"""An unmodified custom loop that is really nondeterministic on a CPU: a Keras Embedding trained with SGD on batches
that hit few rows, so the update is one ResourceScatterSub over many duplicate indices, added from several threads.

Run as it is (twice: the digests differ): python examples/zero_edit/racy_embedding_loop.py
opbisect:                                 opbisect trace examples/zero_edit/racy_embedding_loop.py
"""

import hashlib

import keras
import numpy as np
import tensorflow as tf


def main():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((16,), dtype="int32"), keras.layers.Embedding(1000, 32),
                              keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(4)])
    optimizer = keras.optimizers.SGD(0.1)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    rng = np.random.default_rng(0)
    for _ in range(3):
        x = tf.constant(rng.integers(0, 16, (2048, 16)), tf.int32)  # 32768 lookups of 16 rows
        y = tf.constant(rng.integers(0, 4, 2048), tf.int32)
        train_step(x, y)
    print(hashlib.sha256(b"".join(np.asarray(w).tobytes() for w in model.get_weights())).hexdigest()[:16])


if __name__ == "__main__":
    main()
