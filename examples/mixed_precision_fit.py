"""Mixed precision puts the optimizer inside a branch: a racy Embedding update found inside `cond/then_branch`.

Under `mixed_float16`, Keras wraps the optimizer in a LossScaleOptimizer, whose whole update runs inside a
`tf.cond` (it skips the step when a gradient overflows). The Embedding's SGD update is a ResourceScatterSub; with
16 distinct tokens looked up 32768 times per batch, CPU threads add duplicate rows in a racing order. opbisect
enters the cond and names the scatter inside it, with its region.

Run: opbisect trace examples/mixed_precision_fit.py
"""

import keras
import numpy as np

keras.utils.set_random_seed(0)
keras.mixed_precision.set_global_policy("mixed_float16")
VOCAB, DIM, BATCH, LENGTH, CLASSES = 1000, 64, 2048, 16, 4

model = keras.Sequential([
    keras.Input((LENGTH,), dtype="int32"),
    keras.layers.Embedding(VOCAB, DIM),
    keras.layers.GlobalAveragePooling1D(),
    keras.layers.Dense(CLASSES, dtype="float32"),
])
model.compile(optimizer=keras.optimizers.SGD(0.1),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

rng = np.random.default_rng(0)
x = rng.integers(0, 16, (2 * BATCH, LENGTH)).astype("int32")  # 16 tokens, 32768 lookups per batch
y = rng.integers(0, CLASSES, (2 * BATCH,)).astype("int32")
fit_kwargs = {"batch_size": BATCH, "epochs": 1, "shuffle": False}
