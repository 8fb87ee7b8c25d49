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


def family(kernel: str) -> str:
    """What a kernel row is: opbisect's own kernels, copies and memsets, or the step's (TensorFlow's) kernels."""
    if "opbisect" in kernel or "Fingerprint" in kernel:
        return "opbisect"
    if "memcpy" in kernel.lower() or "memset" in kernel.lower():
        return "copies and memsets"
    return "the step's kernels"


def compared(tables: dict, top: int = 12) -> str:
    """Each profile's device time and kernels per call by family, then the kernels whose time per call grew most
    from the first profile (the baseline) to each other one: where an added cost lands on the device."""
    import pandas as pd

    lines = []
    for name, table in tables.items():
        by = table.assign(family=table["kernel"].map(family)).groupby("family")[["us_per_call", "calls"]].sum()
        profiled = table["total_us"].sum() / table["us_per_call"].sum()  # the calls profiled
        families = "; ".join(f"{f} {r.us_per_call:.1f} us" for f, r in by.iterrows())
        lines.append(f"{name}: {table['us_per_call'].sum():.1f} us of device time a call, rows {len(table)}, "
                     f"launches a call {table['calls'].sum() / profiled:.0f}; {families}")
    base_name, base = next(iter(tables.items()))
    for name, table in list(tables.items())[1:]:
        both = pd.merge(base[["kernel", "us_per_call"]], table[["kernel", "us_per_call"]], on="kernel", how="outer",
                        suffixes=(f" {base_name}", f" {name}")).fillna(0.0)
        both["grew_us"] = both[f"us_per_call {name}"] - both[f"us_per_call {base_name}"]
        lines.append(f"kernels that grew most from {base_name} to {name} (us a call):")
        lines.append(both.sort_values("grew_us", ascending=False).head(top).to_string(index=False))
        lines.append(f"kernels that shrank most from {base_name} to {name}:")
        lines.append(both.sort_values("grew_us").head(top // 2).to_string(index=False))
    return "\n".join(lines)
