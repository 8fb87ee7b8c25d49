"""The BERT-like classifier under mixed precision (`mixed_float16`), in the `model`/`data` form.

Keras wraps the optimizer in a LossScaleOptimizer, whose whole update runs inside a `tf.cond`: on a GPU the
embedding gradients' UnsortedSegmentSum in Adam's sparse update vary, and opbisect names them inside
`cond/then_branch`, as it names them at the top level of the full-precision step (examples/bert_like_fit.py).

Run: opbisect trace examples/bert_like_fit_mixed.py
"""

import keras

keras.mixed_precision.set_global_policy("mixed_float16")

from bert_model import batch, build_model  # noqa: E402 - the policy applies to layers built after it

keras.utils.set_random_seed(0)
model = build_model()
model.compile(optimizer=keras.optimizers.Adam(1e-3),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
data = batch()
