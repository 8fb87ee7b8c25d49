"""The BERT-like step with tf.config.experimental.enable_op_determinism(): the negative control, which must
come out deterministic (exit 0, no culprit) on GPU as on CPU.

Run: opbisect trace examples/bert_like_determinism.py
"""

import runpy
from pathlib import Path

import tensorflow as tf

tf.config.experimental.enable_op_determinism()
globals().update(runpy.run_path(str(Path(__file__).with_name("bert_like.py"))))
