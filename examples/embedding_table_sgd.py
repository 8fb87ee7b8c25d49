"""Embedding(1M x 128) + SGD on a GPU (see embedding_table.py): the table's update is one ResourceScatterSub.

Run: opbisect trace examples/embedding_table_sgd.py
"""

import keras
from embedding_table import make

model, step, inputs = make(keras.optimizers.SGD(0.1))
