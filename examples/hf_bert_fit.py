"""The seed report's own setup: a Hugging Face `TFBertForSequenceClassification` trained with tf.keras (Keras 2)
`model.fit(epochs=2, steps_per_epoch=5)`, seeds set, from-logits cross-entropy, Adam, dropout on.

Reported: bitwise reproducible on the CPU, not on a GPU, and worse with epochs=2. A small BertConfig (random weights,
nothing downloaded) keeps it quick on a CPU. Run as a script, it trains and prints a digest of its final weights:
two fresh processes must print the same digest for the step to be reproducible (the oracle opbisect must agree with).

Run: opbisect trace examples/hf_bert_fit.py     (needs pip install -e '.[hf]')
"""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # tf.keras is Keras 2 (tf_keras), as in the report and in transformers 4.x

import hashlib  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from transformers import BertConfig, TFBertForSequenceClassification  # noqa: E402

tf.keras.utils.set_random_seed(42)
config = BertConfig(vocab_size=1024, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=256, max_position_embeddings=128, num_labels=3)
model = TFBertForSequenceClassification(config)
model.compile(optimizer=tf.keras.optimizers.Adam(3e-5),
              loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

rng = np.random.default_rng(0)
ids = rng.integers(0, config.vocab_size, (160, 64)).astype("int32")
x = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
y = rng.integers(0, config.num_labels, (160,)).astype("int32")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
fit_kwargs = {"epochs": 2, "steps_per_epoch": 5}


def digest(model) -> str:
    return hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()[:16]


if __name__ == "__main__":
    model.fit(dataset, verbose=0, **fit_kwargs)
    print(digest(model))
