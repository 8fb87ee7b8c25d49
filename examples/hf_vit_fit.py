"""A Hugging Face `TFViTForImageClassification` (a convolutional patch embedding, then a transformer) trained with
tf.keras (Keras 2) `model.fit`, seeds set, dropout on: a vision architecture beside the text ones. Small random
weights, nothing downloaded.

Run as a script, it trains and prints a digest of its final weights (the fresh-process oracle).

Run: opbisect trace examples/hf_vit_fit.py     (needs pip install -e '.[hf]')
"""

import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import hashlib  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from transformers import TFViTForImageClassification, ViTConfig  # noqa: E402

tf.keras.utils.set_random_seed(3)
config = ViTConfig(image_size=32, patch_size=4, num_channels=3, hidden_size=64, num_hidden_layers=2,
                   num_attention_heads=4, intermediate_size=128, num_labels=10, hidden_dropout_prob=0.1,
                   attention_probs_dropout_prob=0.1)
model = TFViTForImageClassification(config)
model.compile(optimizer=tf.keras.optimizers.Adam(1e-3),
              loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

rng = np.random.default_rng(0)
pixels = rng.standard_normal((64, 3, 32, 32)).astype("float32")  # channels first, as transformers' ViT takes them
labels = rng.integers(0, config.num_labels, (64,)).astype("int32")
dataset = tf.data.Dataset.from_tensor_slices(({"pixel_values": pixels}, labels)).batch(16)
fit_kwargs = {"epochs": 2, "steps_per_epoch": 2}


def digest(model) -> str:
    return hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()[:16]


if __name__ == "__main__":
    model.fit(dataset, verbose=0, **fit_kwargs)
    print(digest(model))
