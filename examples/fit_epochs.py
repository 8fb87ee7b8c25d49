"""The seed report's situation: `model.fit(epochs=1)` is reproducible, `epochs=2` is not.

A Keras Embedding + Dense classifier trained with SGD, `steps_per_epoch=1` over a dataset of two batches, so
epoch 1 trains on the first batch and epoch 2 on the second (Keras keeps one iterator across epochs when
steps_per_epoch is set). The first batch uses every token once; the second repeats 16 tokens 32768 times, and
SGD's embedding update (ResourceScatterSub) adds duplicate rows from several CPU threads in a racing order.
Nothing changes between the epochs but the data.

Run: opbisect trace examples/fit_epochs.py
"""

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(0)
VOCAB, DIM, BATCH, LENGTH, CLASSES = 32768, 128, 2048, 16, 4

model = keras.Sequential([
    keras.Input((LENGTH,), dtype="int32"),
    keras.layers.Embedding(VOCAB, DIM),
    keras.layers.GlobalAveragePooling1D(),
    keras.layers.Dense(CLASSES),
])
model.compile(optimizer=keras.optimizers.SGD(0.1),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

rng = np.random.default_rng(0)
distinct_tokens = rng.permutation(VOCAB).reshape(BATCH, LENGTH).astype("int32")  # every token once
repeated_tokens = rng.integers(0, 16, (BATCH, LENGTH)).astype("int32")  # 16 tokens, 32768 lookups
labels = rng.integers(0, CLASSES, (2, BATCH)).astype("int32")
dataset = tf.data.Dataset.from_tensor_slices((np.stack([distinct_tokens, repeated_tokens]), labels))
fit_kwargs = {"epochs": 2, "steps_per_epoch": 1}
