"""The seed report's notebook as a script, unmodified in what matters: a Hugging Face
`TFBertForSequenceClassification` (BERT-base sizes: 12 layers, hidden 768) trained with tf.keras (Keras 2, as
transformers 4.x needs) `model.fit(epochs=2)`, seeded the tutorials' way (`np.random.seed` + `tf.random.set_seed`),
printing the weights before and after training as the report's notebook did. Random initial weights (nothing is
downloaded).

Reported: different weights in every fresh run, before training (the seeds) and after (GPU kernels), worse with
epochs=2. Two fresh runs of this script are the user's test.

Run as it is:  python examples/seed_report.py                  (a GPU: about a minute; --small for a CPU)
opbisect:      opbisect fix examples/seed_report.py             then the command it prints, twice
"""

import argparse
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # tf.keras is Keras 2 (tf_keras), as in the report and in transformers 4.x

import hashlib  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from transformers import BertConfig, TFBertForSequenceClassification  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--small", action="store_true", help="a 2-layer BERT for a CPU")
args = parser.parse_args()

np.random.seed(42)  # the tutorials' seeds: neither seeds Python's `random`, which the initializers draw from
tf.random.set_seed(42)

sizes = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256) if args.small else {}
config = BertConfig(vocab_size=8192, max_position_embeddings=128, num_labels=3, **sizes)
model = TFBertForSequenceClassification(config)
model.compile(optimizer=tf.keras.optimizers.Adam(3e-5),
              loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

ids = np.random.randint(0, config.vocab_size, (320, 64)).astype("int32")  # NumPy's seeded generator
x = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
y = np.random.randint(0, config.num_labels, (320,)).astype("int32")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(320).batch(32)  # reshuffled each epoch, seeded by TF


def weights(model) -> str:
    values = model.get_weights()
    return f"sum {sum(float(w.sum()) for w in values):.6f}, digest " \
           f"{hashlib.sha256(b''.join(w.tobytes() for w in values)).hexdigest()[:16]}"


model(x["input_ids"][:2])  # builds the weights, as the notebook's first call did
print("weights before training:", weights(model))
model.fit(dataset, epochs=args.epochs, verbose=0)
print("weights after training:", weights(model))
print("final weights", weights(model).split()[-1])
