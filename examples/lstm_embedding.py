"""A Keras LSTM over embeddings, trained with SGD: the LSTM runs a While loop (no cuDNN on a CPU), which opbisect
enters and fingerprints iteration by iteration; every op in it is deterministic. The Embedding's SGD update, a
ResourceScatterSub of 16 distinct tokens looked up 32768 times, races on CPU threads and is the one source.

Run: opbisect trace examples/lstm_embedding.py
"""

import keras
import numpy as np

keras.utils.set_random_seed(0)
VOCAB, DIM, BATCH, LENGTH, CLASSES = 1000, 64, 2048, 16, 4

model = keras.Sequential([
    keras.Input((LENGTH,), dtype="int32"),
    keras.layers.Embedding(VOCAB, DIM),
    keras.layers.LSTM(16),
    keras.layers.Dense(CLASSES),
])
model.compile(optimizer=keras.optimizers.SGD(0.1),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

rng = np.random.default_rng(0)
data = (rng.integers(0, 16, (BATCH, LENGTH)).astype("int32"), rng.integers(0, CLASSES, (BATCH,)).astype("int32"))
