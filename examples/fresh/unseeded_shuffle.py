"""A tf.data pipeline that shuffles with no seed, in a script that seeds Python and NumPy but never TensorFlow: the
shuffle draws its order anew in every process, so two fresh runs train on other batches.

Run as it is:  python examples/fresh/unseeded_shuffle.py            (prints `final weights <digest>`)
Its twin:      python examples/fresh/unseeded_shuffle.py --seeded   (shuffle(seed=7): one digest)
opbisect:      opbisect trace examples/fresh/unseeded_shuffle.py
"""

import argparse
import hashlib
import random

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--seeded", action="store_true", help="give the shuffle a seed")
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()
random.seed(7)  # Keras' initializers draw from it
np.random.seed(7)

x = np.random.standard_normal((256, 8)).astype("float32")
y = (x[:, :1] > 0).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256, seed=7 if args.seeded else None).batch(32)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(1, activation="sigmoid")])
model.compile(optimizer="sgd", loss="binary_crossentropy")
model.fit(data, epochs=args.epochs, verbose=0)
print("final weights", hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()[:16])
