"""Does the first step of examples/bert_like_fit_mixed.py skip its update (non-finite gradients: the loss scale
halves, the inner optimizer's iterations stay 0), with and without XLA? Run: python3 loss_scale.py 0|1"""
import sys

import keras

sys.path.insert(0, "examples")
keras.mixed_precision.set_global_policy("mixed_float16")
from bert_model import batch, build_model  # noqa: E402

jit = sys.argv[1] == "1"
keras.utils.set_random_seed(0)
model = build_model()
model.compile(optimizer=keras.optimizers.Adam(1e-3),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=jit)
x, y = batch()
for step in range(2):
    model.train_on_batch(x, y)
    o = model.optimizer
    print(f"jit_compile={jit} step {step}: loss scale {float(o.dynamic_scale.numpy())}, "
          f"updates applied {int(o.inner_optimizer.iterations.numpy())}")
