"""The BERT-like classifier in the `model`/`data` form: opbisect builds the step from the model's own train
step, as `model.fit` runs it (same jit_compile setting, compiled loss and metrics).

Run: opbisect trace examples/bert_like_fit.py
Keras compiles the step with XLA on a GPU (its jit_compile="auto"); `OPBISECT_XLA=1` compiles it with XLA anywhere.
"""

import os

import keras
from bert_model import batch, build_model

keras.utils.set_random_seed(0)
model = build_model()
model.compile(optimizer=keras.optimizers.Adam(1e-3),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"], jit_compile=True if os.environ.get("OPBISECT_XLA") == "1" else "auto")
data = batch()
