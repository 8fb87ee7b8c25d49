"""A custom training loop, seeded as Keras asks, whose weights take a nudge about once in 20 steps, drawn after the
step from the operating system's entropy: a stand-in for a race that fires now and then. On an H100, BERT-base under
mixed precision and opbisect's patch parted in 3 of 9 fresh runs, after steps 5, 8 and 9, and agreed in the other 6
(reports/h100/shapes/README.md#lease21). Every run of the step from one state gives one result, and two fresh runs
agree through their first 10 steps about 2 times in 5; through 100 they part.

Run as it is:  python examples/fresh/rare_variation.py      (prints `final weights <digest>`: a new one each run)
opbisect:      opbisect trace examples/fresh/rare_variation.py (exit 1: two fresh runs of the script part)
"""

import hashlib
import random

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(7)
x = np.random.standard_normal((2048, 16)).astype("float32")
y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(0.01)
entropy = random.SystemRandom()  # the OS's: no seed reaches it


@tf.function
def train_step(features, targets):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(features) - targets))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for _epoch in range(2):  # 64 steps each
    for features, targets in tf.data.Dataset.from_tensor_slices((x, y)).batch(32):
        train_step(features, targets)
        if entropy.random() < 0.05:  # the rare event: in about 5 steps of 100
            model.layers[-1].bias.assign_add([1e-3])
print("final weights", hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()[:16])
