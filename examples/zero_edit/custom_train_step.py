"""An unmodified script in the shape of keras-io's guide "Customizing what happens in fit()" (written here, not copied):
everything at module level, a Model subclass overriding train_step, then model.fit(x, y, epochs=3). Its module
defines `model` and `inputs`, names opbisect's target contract also uses, without being a target module.

Run as it is: python examples/zero_edit/custom_train_step.py      (prints a digest of its final weights)
opbisect:     opbisect trace examples/zero_edit/custom_train_step.py
"""

import hashlib

import keras
import numpy as np
import tensorflow as tf
from keras import ops

keras.utils.set_random_seed(1)


class CustomModel(keras.Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_tracker = keras.metrics.Mean(name="loss")

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = ops.mean(ops.square(y - y_pred))
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply(gradients, self.trainable_variables)
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}

    @property
    def metrics(self):
        return [self.loss_tracker]


inputs = keras.Input(shape=(32,))
hidden = keras.layers.Dense(16, activation="relu")(inputs)
outputs = keras.layers.Dense(1)(hidden)
model = CustomModel(inputs, outputs)
model.compile(optimizer="adam")

x = np.random.random((1000, 32)).astype("float32")
y = np.random.random((1000, 1)).astype("float32")
model.fit(x, y, epochs=3, verbose=0)

digest = hashlib.sha256(b"".join(np.asarray(w).tobytes() for w in model.get_weights())).hexdigest()[:16]
print(digest)
