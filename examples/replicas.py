"""The MirroredStrategy the `*_mirrored` examples train under (not a target itself: it defines no step).

Every GPU is a replica; where there are fewer than two GPUs (a CPU machine, CI), two logical CPUs stand in for
them, so the same script runs, replicated, everywhere. TensorFlow fixes its logical devices when it starts:
import this module before anything runs an op.
"""

import tensorflow as tf


def make_strategy() -> tf.distribute.MirroredStrategy:
    gpus = tf.config.list_physical_devices("GPU")
    if len(gpus) >= 2:
        return tf.distribute.MirroredStrategy([f"/gpu:{i}" for i in range(len(gpus))])  # NCCL all-reduce
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


strategy = make_strategy()
