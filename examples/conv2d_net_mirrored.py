"""The Conv2D network under tf.distribute.MirroredStrategy (`model`/`data` form): each replica's convolutions on
its own device, the gradients all-reduced between them.

Run: opbisect trace examples/conv2d_net_mirrored.py
"""

import keras
import numpy as np
from replicas import strategy

keras.utils.set_random_seed(0)
with strategy.scope():
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
rows = 64 * strategy.num_replicas_in_sync
data = (rng.standard_normal((rows, 32, 32, 3)).astype("float32"), rng.integers(0, 10, (rows,)).astype("int32"))
