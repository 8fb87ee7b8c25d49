"""A tf.data pipeline whose parallel map runs with deterministic=False: its elements come in the order the calls
finish, and each call takes a time of its own (an image decode of another size, here a short sleep), so two fresh
runs train on other batches although every seed is set.

Run as it is:  python examples/fresh/parallel_map.py                   (prints `final weights <digest>`)
Its twin:      python examples/fresh/parallel_map.py --deterministic   (deterministic=True: one digest)
opbisect:      opbisect trace examples/fresh/parallel_map.py
"""

import argparse
import hashlib
import os
import time

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--deterministic", action="store_true", help="the map keeps the input order")
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()
keras.utils.set_random_seed(7)


def decode(x):
    time.sleep(os.urandom(1)[0] / 255 * 0.004)  # a decode's time varies with its input, not with any seed
    return x


x = np.random.standard_normal((128, 8)).astype("float32")
y = (x[:, :1] > 0).astype("float32")
data = (tf.data.Dataset.from_tensor_slices((x, y))
        .map(lambda a, b: (tf.numpy_function(decode, [a], tf.float32), b), num_parallel_calls=4,
             deterministic=args.deterministic)
        .map(lambda a, b: (tf.ensure_shape(a, [8]), b))
        .batch(32))
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(1, activation="sigmoid")])
model.compile(optimizer="sgd", loss="binary_crossentropy")
model.fit(data, epochs=args.epochs, verbose=0)
print("final weights", hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()[:16])
