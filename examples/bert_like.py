"""A BERT-like Keras classifier's training step (embedding, attention, LayerNorm, Dense, from_logits sparse
cross-entropy, Adam), in the `step`/`inputs` form.

Deterministic on CPU; the GPU reference case (atomics in the embedding gradient, the cross-entropy and the bias
gradients). Run: opbisect trace examples/bert_like.py
"""

import keras
import tensorflow as tf
from bert_model import batch, build_model

keras.utils.set_random_seed(0)
model = build_model()
optimizer = keras.optimizers.Adam(1e-3)
optimizer.build(model.trainable_variables)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@tf.function
def step(ids, labels):
    with tf.GradientTape() as tape:
        loss = loss_fn(labels, model(ids, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


ids, labels = batch()
inputs = (tf.constant(ids), tf.constant(labels))
