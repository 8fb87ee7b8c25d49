"""Keras ResNet50 (keras.applications, random weights, 1000 classes) in the `model`/`data` form: the scale example
for the GPU (about 25M parameters, 160 convolutions with their batch norms). Too slow for a CPU beyond a try.

`OPBISECT_XLA=1` compiles the train step with XLA (`jit_compile=True`), otherwise it runs as a plain tf.function.

Run: opbisect trace examples/resnet50.py
"""

import os

import keras
import numpy as np

keras.utils.set_random_seed(0)
BATCH = int(os.environ.get("OPBISECT_RESNET_BATCH", "32"))
model = keras.applications.ResNet50(weights=None, input_shape=(224, 224, 3), classes=1000)
model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=False),
              jit_compile=os.environ.get("OPBISECT_XLA") == "1")
rng = np.random.default_rng(0)
data = (rng.standard_normal((BATCH, 224, 224, 3)).astype("float32"), rng.integers(0, 1000, (BATCH,)).astype("int32"))
