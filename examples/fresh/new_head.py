"""Two phases, seeded the tutorials' way (`np.random.seed` + `tf.random.set_seed`): a base whose initializers carry
their own seeds is trained first, then a new head is put on it and the whole trained again. The first training call
starts alike in every fresh process; the second does not: the head's unseeded initializer takes its seed from Python's
`random`, which neither call seeds. Two fresh runs print different weights.

Run as it is:  python examples/fresh/new_head.py            (prints `final weights <digest>`)
Its twin:      python examples/fresh/new_head.py --seeded   (keras.utils.set_random_seed: one digest)
opbisect:      opbisect trace examples/fresh/new_head.py    (exit 1: the runs part in fit:2; next: trace --at fit:2)
"""

import argparse
import hashlib

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--seeded", action="store_true", help="seed as Keras asks: keras.utils.set_random_seed")
args = parser.parse_args()

if args.seeded:
    keras.utils.set_random_seed(7)
else:
    np.random.seed(7)
    tf.random.set_seed(7)

x = np.random.standard_normal((256, 16)).astype("float32")  # NumPy's seeded generator: the same data every run
y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
seeded = keras.initializers.GlorotUniform(seed=1)
base = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu", kernel_initializer=seeded),
                         keras.layers.Dense(1, activation="sigmoid", kernel_initializer=seeded)])
base.compile(optimizer="sgd", loss="binary_crossentropy")
base.fit(x, y, epochs=1, batch_size=32, verbose=0)  # 8 steps: the base, alike in every process

model = keras.Sequential([base.layers[0], keras.layers.Dense(1, activation="sigmoid")])  # a new head, unseeded
model.compile(optimizer="sgd", loss="binary_crossentropy")
model.fit(x, 1.0 - y, epochs=1, batch_size=32, verbose=0)
print("final weights", hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()[:16])
