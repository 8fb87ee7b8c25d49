"""Where a step's device time goes: each kernel's total time over some calls, from TensorFlow's profiler.

    from benchmarks.device_profile import kernel_times
    table = kernel_times(lambda: step(*inputs), calls=20)   # pandas DataFrame: kernel, calls, total_us, us_per_call

On a GPU the rows are the CUDA kernels and copies (CUPTI's events on the device plane); on a CPU, TensorFlow's
ops as the host threads ran them. The first call runs before profiling (tracing, autotuning)."""

from __future__ import annotations

import tempfile
from pathlib import Path


def kernel_times(call, calls: int = 20):
    import pandas as pd
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    call()
    tf.test.experimental.sync_devices()
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        for _ in range(calls):
            call()
        tf.test.experimental.sync_devices()
        tf.profiler.experimental.stop()
        space = xplane_pb2.XSpace()
        space.ParseFromString(next(Path(logdir).rglob("*.xplane.pb")).read_bytes())
    planes = [p for p in space.planes if p.name.startswith("/device:GPU")] or \
        [p for p in space.planes if p.name == "/host:CPU"]
    rows = []
    for plane in planes:
        names = {i: m.display_name or m.name for i, m in plane.event_metadata.items()}
        for line in plane.lines:
            if plane.name == "/host:CPU" and "tf_" not in line.name and "TF" not in line.name:
                continue  # the host's TensorFlow executor threads only
            rows += [(names.get(e.metadata_id, "?")[:90], e.duration_ps / 1e6) for e in line.events]
    frame = pd.DataFrame(rows, columns=["kernel", "us"])
    table = frame.groupby("kernel")["us"].agg(["count", "sum"]).rename(columns={"count": "calls", "sum": "total_us"})
    table["us_per_call"] = table["total_us"] / calls
    return table.sort_values("total_us", ascending=False).reset_index()
