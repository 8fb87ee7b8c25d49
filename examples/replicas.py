"""The MirroredStrategy the `*_mirrored` examples train under (not a target itself: it defines no step).

Every GPU is a replica, the gradients all-reduced by NCCL. With one GPU, it is split into two logical GPUs, which
NCCL cannot reduce between (one physical device): their all-reduce goes through one device instead. With no GPU
(a CPU machine, CI) two logical CPUs stand in, so the same script runs, replicated, everywhere. TensorFlow fixes its
logical devices when it starts: import this module before anything runs an op.
"""

import tensorflow as tf


def make_strategy() -> tf.distribute.MirroredStrategy:
    gpus = tf.config.list_physical_devices("GPU")
    if len(gpus) >= 2:
        return tf.distribute.MirroredStrategy([f"/gpu:{i}" for i in range(len(gpus))])  # NCCL all-reduce
    if gpus:
        half = tf.config.LogicalDeviceConfiguration(memory_limit=32 * 1024)  # MiB
        tf.config.set_logical_device_configuration(gpus[0], [half, half])
        return tf.distribute.MirroredStrategy(["/gpu:0", "/gpu:1"],
                                              cross_device_ops=tf.distribute.ReductionToOneDevice())
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


strategy = make_strategy()
