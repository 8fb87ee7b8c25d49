"""Fingerprint throughput against the copy bandwidth, measured side by side in one run.

For three sets of tensors (a few large ones; a mix shaped like a transformer step's taps; many small ones) it
times, with the tensors already on the device:
  copy       a device-to-device copy of every tensor (DeepCopy): bytes read + written per second
  fused      the OpbisectFingerprint op over all tensors (one launch per 96 tensors)
  wsum-ops   the weighted sum in TensorFlow ops, several kernels per tensor
  wsum-xla   the same, all tensors in one XLA-compiled function
  farmhash   tf.fingerprint per tensor (CPU only: its kernel is CPU-only)
Fingerprint throughput counts the bytes read once. The floor for a set is its bytes at the copy bandwidth
(read only, so half the copy's bytes moved) plus nothing else; the table gives time over floor.

    python benchmarks/fingerprint_throughput.py [--device gpu] [--total-mb 2048] [--repeats 20]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from timing import timed  # noqa: E402 - benchmarks/, the script's folder, is on sys.path


def tensor_sets(tf, total_bytes: int):
    import numpy as np

    rng = np.random.default_rng(0)

    def make(sizes):
        return [tf.constant(rng.standard_normal(max(n // 4, 1)).astype(np.float32)) for n in sizes]

    large = [total_bytes // 16] * 16
    # A transformer step's taps: a few big attention and FFN activations, many medium, many tiny.
    mix = [total_bytes // 40] * 20 + [total_bytes // 400] * 150 + [4096] * 600 + [16] * 600
    small = [16384] * 2000
    return {"16 large": make(large), "transformer-like mix": make(mix), "2000 small (16 KB)": make(small)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    p.add_argument("--total-mb", type=int, default=2048)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--json", type=Path)
    a = p.parse_args()

    from opbisect.capture import fingerprint
    from opbisect.execute.prepared import setup_tensorflow

    tf, kind = setup_tensorflow(a.device)
    fused = fingerprint.FusedFingerprinter(cuda=kind == "gpu")
    wsum = fingerprint.WeightedSumFingerprinter()
    device = "/GPU:0" if kind == "gpu" else "/CPU:0"
    rows = []
    with tf.device(device):
        for name, tensors in tensor_sets(tf, a.total_mb * 2**20).items():
            nbytes = sum(int(t.shape.num_elements()) * 4 for t in tensors)
            # The tensors are captured, not passed: passing 2000 arguments costs more Python time than the work.
            methods = {
                "copy": lambda ts: tf.add_n([tf.reduce_sum(tf.raw_ops.DeepCopy(x=t)[:1]) for t in ts]),
                "fused": lambda ts: fused.many(list(ts)),
                "wsum-ops": lambda ts: wsum.many(list(ts)),
                "wsum-xla": lambda ts: wsum.many(list(ts)),
            }
            if kind == "cpu":
                methods["farmhash"] = lambda ts: fingerprint.FarmhashFingerprinter().many(list(ts))
            times = {}
            for method, body in methods.items():
                fn = tf.function(lambda body=body, tensors=tensors: body(tensors), jit_compile=method == "wsum-xla")
                try:
                    # A small result: copying it back waits for the device.
                    times[method] = timed(fn, a.repeats, lambda r: r.numpy())
                except Exception as exc:  # a method that does not run here is reported, not fatal
                    times[method] = float("nan")
                    print(f"{name} {method}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            copy_bw = 2 * nbytes / times["copy"]  # read + write
            floor = nbytes / copy_bw
            for method, seconds in times.items():
                moved = 2 * nbytes if method == "copy" else nbytes
                rows.append({"set": name, "tensors": len(tensors), "MB": nbytes / 2**20, "method": method,
                             "ms": seconds * 1e3, "GB/s": moved / seconds / 1e9,
                             "over_floor": seconds / floor if method != "copy" else float("nan")})
    print(f"fingerprint throughput on {kind} ({fused.name}), median of {a.repeats}")
    print(f"{'set':<24}{'n':>6}{'MB':>8}  {'method':<10}{'ms':>9}{'GB/s':>9}{'x floor':>9}")
    for r in rows:
        print(f"{r['set']:<24}{r['tensors']:>6}{r['MB']:>8.0f}  {r['method']:<10}{r['ms']:>9.3f}{r['GB/s']:>9.1f}"
              f"{r['over_floor']:>9.2f}")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
