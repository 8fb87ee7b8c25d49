"""A language-model head over a large vocabulary, trained with Adam: the fused sparse softmax cross-entropy.

On an H200 the fused `SparseSoftmaxCrossEntropyWithLogits` kernel over 4096 tokens x 32768 classes gives another
result in every run, and under `enable_op_determinism()` the raw kernel raises (tf.nn's wrapper then builds the
loss from log-softmax and a gather instead). The embedding's sparse gradient adds Adam's segment sums on a GPU.
On a CPU the sizes are smaller, so the script runs anywhere.

Run: opbisect trace examples/lm_head_xent.py
     opbisect verify examples/lm_head_xent.py --patch reports/lm_head_xent/sources.csv
     opbisect verify examples/lm_head_xent.py --patch PATCH -- --vocab 8192 --dim 256 --batch 32 --seq 256
(other shapes give the same graph, node names included, so one patch serves every shape)
"""

import argparse

import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(0)
GPU = bool(tf.config.list_physical_devices("GPU"))
parser = argparse.ArgumentParser()
parser.add_argument("--vocab", type=int, default=32768 if GPU else 4096)
parser.add_argument("--dim", type=int, default=512 if GPU else 64)
parser.add_argument("--batch", type=int, default=32 if GPU else 4, help="sequences per step")
parser.add_argument("--seq", type=int, default=128, help="tokens per sequence")
args = parser.parse_args()
VOCAB, DIM = args.vocab, args.dim

embed = keras.layers.Embedding(VOCAB, DIM)
hidden = keras.layers.Dense(DIM, activation="gelu")
head = keras.layers.Dense(VOCAB)  # the LM head: one logit per vocabulary entry
model = keras.Sequential([keras.Input((None,), dtype="int32"), embed, hidden, head])
optimizer = keras.optimizers.Adam(1e-3)
optimizer.build(model.trainable_variables)


@tf.function
def step(tokens, targets):
    with tf.GradientTape() as tape:
        logits = model(tokens, training=True)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


rng = np.random.default_rng(0)
inputs = (tf.constant(rng.integers(0, VOCAB, (args.batch, args.seq)), tf.int32),
          tf.constant(rng.integers(0, VOCAB, (args.batch, args.seq)), tf.int32))
