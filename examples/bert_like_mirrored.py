"""The BERT-like classifier under tf.distribute.MirroredStrategy, in the `model`/`data` form: opbisect traces the
train step replicated as `model.fit` runs it, each replica on its device and the gradients' all-reduce between
them (NCCL on GPUs). A source is named with its replica and device.

Every GPU is a replica (two logical CPUs where there are fewer than two GPUs: `replicas.py`). The global batch
is the single-device example's batch on every replica.

Run: opbisect trace examples/bert_like_mirrored.py
"""

import keras
from bert_model import BATCH, batch, build_model
from replicas import strategy

keras.utils.set_random_seed(0)
with strategy.scope():
    model = build_model()
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
data = batch(rows=BATCH * strategy.num_replicas_in_sync)
