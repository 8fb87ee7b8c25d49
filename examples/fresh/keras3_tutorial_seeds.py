"""A Keras 3 `fit` script seeded the tutorials' way, `np.random.seed` + `tf.random.set_seed`: two fresh runs print
different weights, because Keras' unseeded initializers (and its Dropout's generator) take their seeds from Python's
`random`, which neither call seeds.

Run as it is:  python examples/fresh/keras3_tutorial_seeds.py            (prints `final weights <digest>`)
Its twin:      python examples/fresh/keras3_tutorial_seeds.py --seeded   (keras.utils.set_random_seed: one digest)
opbisect:      opbisect trace examples/fresh/keras3_tutorial_seeds.py
"""

import argparse
import hashlib

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--seeded", action="store_true", help="seed as Keras asks: keras.utils.set_random_seed")
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

if args.seeded:
    keras.utils.set_random_seed(7)
else:
    np.random.seed(7)
    tf.random.set_seed(7)

x = np.random.standard_normal((256, 16)).astype("float32")  # NumPy's seeded generator: the same data every run
y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dropout(0.1),
                          keras.layers.Dense(1, activation="sigmoid")])
model.compile(optimizer="adam", loss="binary_crossentropy")
model.fit(x, y, epochs=args.epochs, batch_size=32, verbose=0)
print("final weights", hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()[:16])
