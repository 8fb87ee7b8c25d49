"""Transfer learning as the Keras guide writes it: the pretrained base frozen while the head trains, then the base
thawed and everything fine-tuned (`compile` again, a lower learning rate). Seeded as Keras asks, yet two fresh runs
print different weights on a CPU: only the fine-tuning phase races (SGD adds the thawed embedding's duplicate rows
from several threads: one ResourceScatterSub over 32768 rows of 16 distinct ids), and the first phase is clean.

Run as it is: python examples/zero_edit/fine_tune.py                (prints a digest of its final weights)
opbisect:     opbisect fix examples/zero_edit/fine_tune.py           (the first fit: reproducible, exit 0)
              opbisect fix examples/zero_edit/fine_tune.py --at fit:2   (the fine-tuning: the scatter, patched)
"""

import hashlib

import keras
import numpy as np

VOCAB, DIM, BATCH, LENGTH, CLASSES = 1000, 32, 2048, 16, 4

keras.utils.set_random_seed(0)
base = keras.Sequential([keras.Input((LENGTH,), dtype="int32"), keras.layers.Embedding(VOCAB, DIM),
                         keras.layers.GlobalAveragePooling1D()], name="base")
model = keras.Sequential([base, keras.layers.Dense(CLASSES)])
loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
rng = np.random.default_rng(0)
x, y = rng.integers(0, 16, (4 * BATCH, LENGTH)), rng.integers(0, CLASSES, (4 * BATCH,))

base.trainable = False  # the head first
model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss)
model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0)

base.trainable = True  # then everything, gently
model.compile(optimizer=keras.optimizers.SGD(0.01), loss=loss)
model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0)
print("final weights", hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()[:16])
