"""An unmodified custom training loop over tf.data, as TensorFlow's tutorials write one: a model, an optimizer, a
@tf.function train step with tf.GradientTape, an evaluation function beside it, epochs over a dataset, in main().

Run as it is: python examples/zero_edit/custom_loop.py --epochs 3      (prints a digest of its final weights)
opbisect:     opbisect trace examples/zero_edit/custom_loop.py --steps 3 -- --epochs 3
"""

import argparse
import hashlib

import keras
import numpy as np
import tensorflow as tf


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    keras.utils.set_random_seed(2)
    rng = np.random.default_rng(2)
    features = rng.standard_normal((320, 12)).astype("float32")
    targets = rng.integers(0, 4, 320).astype("int32")
    train = tf.data.Dataset.from_tensor_slices((features, targets)).batch(32)
    model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(4)])
    optimizer = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def test_step(x, y):
        return loss_fn(y, model(x, training=False))

    for epoch in range(args.epochs):
        for x, y in train:
            train_step(x, y)
        print(f"epoch {epoch}: loss {float(test_step(features, targets)):.4f}")
    print(hashlib.sha256(b"".join(np.asarray(w).tobytes() for w in model.get_weights())).hexdigest()[:16])


if __name__ == "__main__":
    main()
