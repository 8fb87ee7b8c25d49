"""The replicated BERT-like step with tf.config.experimental.enable_op_determinism(): the negative control under
MirroredStrategy (the all-reduce included).

Run: opbisect trace examples/bert_like_mirrored_determinism.py
"""

import runpy
from pathlib import Path

import tensorflow as tf

tf.config.experimental.enable_op_determinism()
globals().update(runpy.run_path(str(Path(__file__).with_name("bert_like_mirrored.py"))))
