"""Embedding(1M x 128) + Adagrad on a GPU (see embedding_table.py): scatters into the accumulator and the table.

Run: opbisect trace examples/embedding_table_adagrad.py
"""

import keras
from embedding_table import make

model, step, inputs = make(keras.optimizers.Adagrad(0.1))
