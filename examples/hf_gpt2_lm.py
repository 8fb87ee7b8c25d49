"""A Hugging Face `TFGPT2LMHeadModel` trained on its own internal loss: the labels are passed in `x` and the model is
compiled with no loss (transformers computes the shifted language-model cross-entropy inside its train step),
tf.keras (Keras 2), seeds set, dropout on. Small random weights, nothing downloaded.

Run as a script, it trains three steps and prints a digest of its final weights (the fresh-process oracle).

Run: opbisect trace examples/hf_gpt2_lm.py     (needs pip install -e '.[hf]')
"""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import hashlib  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from transformers import GPT2Config, TFGPT2LMHeadModel  # noqa: E402

tf.keras.utils.set_random_seed(7)
config = GPT2Config(vocab_size=2048, n_positions=64, n_embd=128, n_layer=2, n_head=4)
model = TFGPT2LMHeadModel(config)
model.compile(optimizer=tf.keras.optimizers.Adam(1e-4))  # no loss: the model's own

rng = np.random.default_rng(0)
ids = rng.integers(0, config.vocab_size, (8, 64)).astype("int32")
data = ({"input_ids": ids, "attention_mask": np.ones_like(ids), "labels": ids},)  # x alone: labels inside it


def digest(model) -> str:
    return hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()[:16]


if __name__ == "__main__":
    for _ in range(3):
        model.train_on_batch(data[0])
    print(digest(model))
