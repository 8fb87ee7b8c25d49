"""The BERT-like classifier in the `model`/`data` form: opbisect builds the step from the model's own train
step, as `model.fit` runs it (same jit_compile setting, compiled loss and metrics).

Run: opbisect trace examples/bert_like_fit.py
"""

import keras
from bert_model import batch, build_model

keras.utils.set_random_seed(0)
model = build_model()
model.compile(optimizer=keras.optimizers.Adam(1e-3),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
data = batch()
