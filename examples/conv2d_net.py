"""A small Keras Conv2D network (two conv layers, pooling, Dense) trained with Adam, in the model/data form.

On a GPU, cuDNN picks convolution algorithms by autotuning once per process: runs inside one process share
the choice, so a difference that comes from autotuning shows only across processes.
Run: opbisect trace examples/conv2d_net.py
"""

import keras
import numpy as np

keras.utils.set_random_seed(0)
model = keras.Sequential([
    keras.Input((32, 32, 3)),
    keras.layers.Conv2D(32, 3, activation="relu"),
    keras.layers.Conv2D(64, 3, activation="relu"),
    keras.layers.MaxPooling2D(),
    keras.layers.Flatten(),
    keras.layers.Dense(10),
])
model.compile(optimizer=keras.optimizers.Adam(1e-3),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)
rng = np.random.default_rng(0)
data = (rng.standard_normal((64, 32, 32, 3)).astype("float32"), rng.integers(0, 10, (64,)).astype("int32"))
