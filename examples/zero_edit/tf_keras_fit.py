"""An unmodified Keras 2 (tf.keras under TF_USE_LEGACY_KERAS=1) training script: a GRU text classifier with
dropout, trained with model.fit over a tf.data pipeline, in main().

Run as it is: python examples/zero_edit/tf_keras_fit.py 3      (epochs; prints a digest of its final weights)
opbisect:     opbisect trace examples/zero_edit/tf_keras_fit.py -- 3
"""

import hashlib
import os
import sys

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def main(epochs: int):
    tf.keras.utils.set_random_seed(1)
    rng = np.random.default_rng(1)
    tokens = rng.integers(1, 500, (256, 20)).astype("int32")
    labels = rng.integers(0, 2, 256).astype("int32")
    data = tf.data.Dataset.from_tensor_slices((tokens, labels)).shuffle(256, seed=1).batch(32)
    model = tf.keras.Sequential([tf.keras.layers.Embedding(500, 16), tf.keras.layers.GRU(16),
                                 tf.keras.layers.Dropout(0.3), tf.keras.layers.Dense(2)])
    model.compile(optimizer=tf.keras.optimizers.Adam(1e-3),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(data, epochs=epochs, verbose=0)
    print(hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()[:16])


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
