"""A small BERT-like classifier shared by the bert_like examples (not a target itself: it defines no step).

Token and position embeddings, transformer encoder blocks (multi-head attention, LayerNorm, GELU feed-forward),
mean pooling and a Dense classifier, trained with SparseCategoricalCrossentropy(from_logits=True) and Adam.
"""

import os

import keras
import numpy as np

# OPBISECT_BERT=base gives the GPU benchmark's size; the default keeps CPU runs and tests quick.
SIZES = {"small": (4000, 64, 128, 4, 2, 8, 32), "base": (30522, 128, 768, 12, 4, 8, 32)}
VOCAB, LENGTH, DIM, HEADS, LAYERS, CLASSES, BATCH = SIZES[os.environ.get("OPBISECT_BERT", "small")]


class Embeddings(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.tokens = keras.layers.Embedding(VOCAB, DIM)
        self.positions = keras.layers.Embedding(LENGTH, DIM)

    def call(self, ids):
        positions = keras.ops.arange(keras.ops.shape(ids)[1])
        return self.tokens(ids) + self.positions(positions)[None]


def encoder_block(x):
    attended = keras.layers.MultiHeadAttention(HEADS, DIM // HEADS)(x, x)
    x = keras.layers.LayerNormalization()(x + attended)
    hidden = keras.layers.Dense(4 * DIM, activation="gelu")(x)
    return keras.layers.LayerNormalization()(x + keras.layers.Dense(DIM)(hidden))


def build_model() -> keras.Model:
    ids = keras.Input((LENGTH,), dtype="int32")
    x = Embeddings()(ids)
    for _ in range(LAYERS):
        x = encoder_block(x)
    logits = keras.layers.Dense(CLASSES)(keras.layers.GlobalAveragePooling1D()(x))
    return keras.Model(ids, logits)


def batch(seed: int = 0, rows: int = BATCH):
    rng = np.random.default_rng(seed)
    # Zipf-like token ids: frequent tokens repeat within the batch, as in real text.
    ids = np.minimum(rng.zipf(1.3, (rows, LENGTH)), VOCAB - 1).astype("int32")
    labels = rng.integers(0, CLASSES, (rows,)).astype("int32")
    return ids, labels
