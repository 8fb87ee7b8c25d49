"""A tf_keras (Keras 2) `fit` script that picks Keras 2 itself, as the TensorFlow docs' tf_keras notebooks do, and seeds
the tutorials' way, `np.random.seed` + `tf.random.set_seed`: two fresh runs print different weights, because tf_keras'
unseeded initializers take their seeds from Python's `random`, which neither call seeds.

Run as it is:  python examples/fresh/tf_keras_tutorial_seeds.py            (prints `final weights <digest>`)
Its twin:      python examples/fresh/tf_keras_tutorial_seeds.py --seeded   (tf.keras.utils.set_random_seed)
opbisect:      opbisect trace examples/fresh/tf_keras_tutorial_seeds.py
"""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # before TensorFlow is imported: tf.keras is tf_keras from here on

import argparse  # noqa: E402
import hashlib  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.keras import layers  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--seeded", action="store_true", help="seed as Keras asks: tf.keras.utils.set_random_seed")
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

if args.seeded:
    tf.keras.utils.set_random_seed(7)
else:
    np.random.seed(7)
    tf.random.set_seed(7)

x = np.random.standard_normal((256, 16)).astype("float32")
y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).batch(32)  # seeded by tf.random.set_seed
model = tf.keras.Sequential([layers.Dense(32, activation="relu", input_shape=(16,)), layers.Dropout(0.1),
                             layers.Dense(1, activation="sigmoid")])
model.compile(optimizer="adam", loss="binary_crossentropy")
model.fit(data, epochs=args.epochs, verbose=0)
print("keras:", layers.__name__.split(".")[0])
print("final weights", hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()[:16])
