"""A text model whose vocabulary is built from a Python `set`: the set's order follows PYTHONHASHSEED, which Python
draws anew in every process, so each word gets another id and every batch differs between two fresh runs, although
every seed is set.

Run as it is:  python examples/fresh/set_vocabulary.py            (prints `final weights <digest>`)
Its twin:      python examples/fresh/set_vocabulary.py --sorted   (the vocabulary in sorted order: one digest)
opbisect:      opbisect trace examples/fresh/set_vocabulary.py
"""

import argparse
import hashlib

import keras
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--sorted", action="store_true", help="build the vocabulary in sorted order")
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()
keras.utils.set_random_seed(7)

TEXT = ("the quick brown fox jumps over the lazy dog while a slow red hen walks past the old barn and the young "
        "cat sleeps in the warm sun near a quiet river where small fish swim").split()
words = sorted(set(TEXT)) if args.sorted else list(set(TEXT))
vocabulary = {w: i for i, w in enumerate(words)}
rng = np.random.default_rng(0)
sentences = [rng.choice(TEXT, 6) for _ in range(128)]
x = np.array([[vocabulary[w] for w in s] for s in sentences], "int32")
y = np.array([float("fox" in s) for s in sentences], "float32")[:, None]

model = keras.Sequential([keras.Input((6,), dtype="int32"), keras.layers.Embedding(len(vocabulary), 8),
                          keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1, activation="sigmoid")])
model.compile(optimizer="adam", loss="binary_crossentropy")
model.fit(x, y, epochs=args.epochs, batch_size=32, shuffle=False, verbose=0)
print("final weights", hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()[:16])
