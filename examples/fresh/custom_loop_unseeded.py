"""A custom training loop (tf.GradientTape in a tf.function, keras-io's "training loop from scratch" shape) whose
model is built with no seed at all: two fresh runs print different weights.

Run as it is:  python examples/fresh/custom_loop_unseeded.py            (prints `final weights <digest>`)
Its twin:      python examples/fresh/custom_loop_unseeded.py --seeded   (keras.utils.set_random_seed first)
opbisect:      opbisect trace examples/fresh/custom_loop_unseeded.py
"""

import argparse
import hashlib

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--seeded", action="store_true", help="keras.utils.set_random_seed before the model is built")
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()
if args.seeded:
    keras.utils.set_random_seed(7)

rng = np.random.default_rng(0)  # the data: seeded on its own, the same in every run
x = rng.standard_normal((128, 8)).astype("float32")
y = x @ rng.standard_normal((8, 1)).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)

model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(0.05)
loss_fn = keras.losses.MeanSquaredError()


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_weights)
    optimizer.apply_gradients(zip(grads, model.trainable_weights))
    return loss


for epoch in range(args.epochs):  # noqa: B007 - keras-io's loop, as written there
    for step, (xb, yb) in enumerate(dataset):  # noqa: B007 - `step`: the loop's counter, as keras-io names it
        train_step(xb, yb)
print("final weights", hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()[:16])
