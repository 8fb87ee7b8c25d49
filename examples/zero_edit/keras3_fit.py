"""An unmodified Keras 3 training script: argparse, main(), model.fit over NumPy arrays (which fit shuffles).

Run as it is: python examples/zero_edit/keras3_fit.py --epochs 20      (prints a digest of its final weights)
opbisect:     opbisect trace examples/zero_edit/keras3_fit.py -- --epochs 20
"""

import argparse
import hashlib

import keras
import numpy as np


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dropout(0.2),
                              keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((512, 8)).astype("float32"), rng.standard_normal((512, 1)).astype("float32")
    model.fit(x, y, epochs=args.epochs, batch_size=64, verbose=0)
    print(hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()[:16])


if __name__ == "__main__":
    main()
