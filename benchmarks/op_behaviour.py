"""TensorFlow's own behaviour, measured: for each known nondeterministic op type, alone on one device, does it vary
in 20 runs on identical inputs, does `enable_op_determinism()` make it deterministic or raise, and what does the
switch cost the op alone (median time, each variant in its own process, since the switch is global).

    python benchmarks/op_behaviour.py [--device cpu|gpu] [--runs 20] > table.md

Inputs are synthetic, sized so that races can fire (many duplicate indices, large reductions). Timings are of
the op alone, eagerly, with its result copied to the host; a step's cost is another question (benchmarks/).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import time


def cases(tf, np):
    """op type -> (a function that runs the op once and returns its result as arrays)."""
    rng = np.random.default_rng(0)
    n, rows, width = 1 << 18, 64, 64
    data = tf.constant(rng.standard_normal((n, width)).astype(np.float32))
    ids = tf.constant(rng.integers(0, rows, n).astype(np.int32))
    sorted_ids = tf.sort(ids)
    image = tf.constant(rng.standard_normal((8, 32, 32, 16)).astype(np.float32))
    grads = tf.constant(rng.standard_normal((8, 64, 64, 16)).astype(np.float32))
    logits = tf.constant(rng.standard_normal((4096, 1000)).astype(np.float32))
    labels = tf.constant(rng.integers(0, 1000, 4096).astype(np.int32))
    bias_grad = tf.constant(rng.standard_normal((4096, 64, 256)).astype(np.float32))
    filt = tf.constant(rng.standard_normal((3, 3, 16, 32)).astype(np.float32))
    conv_out_grad = tf.constant(rng.standard_normal((8, 32, 32, 32)).astype(np.float32))
    table = tf.Variable(tf.zeros([rows, width]))
    raw = tf.raw_ops

    def scatter(op):
        def run():
            table.assign(tf.zeros([rows, width]))
            op(resource=table.handle, indices=ids, updates=data)
            return [table.numpy()]
        return run

    addends = [data * (i + 1) for i in range(16)]
    pool_in = tf.constant(rng.standard_normal((8, 64, 64, 16)).astype(np.float32))
    pooled = tf.nn.max_pool2d(pool_in, 2, 2, "VALID")
    return {
        "UnsortedSegmentSum": lambda: [raw.UnsortedSegmentSum(data=data, segment_ids=ids, num_segments=rows).numpy()],
        "SegmentSum": lambda: [raw.SegmentSum(data=data, segment_ids=sorted_ids).numpy()],
        "ResourceScatterAdd": scatter(raw.ResourceScatterAdd),
        "ResourceScatterSub": scatter(raw.ResourceScatterSub),
        "TensorScatterAdd": lambda: [raw.TensorScatterAdd(tensor=tf.zeros([rows, width]), indices=ids[:, None],
                                                          updates=data).numpy()],
        "BiasAddGrad": lambda: [raw.BiasAddGrad(out_backprop=bias_grad).numpy()],
        "SparseSoftmaxCrossEntropyWithLogits": lambda: [
            t.numpy() for t in raw.SparseSoftmaxCrossEntropyWithLogits(features=logits, labels=labels)],
        "ResizeBilinearGrad": lambda: [raw.ResizeBilinearGrad(grads=grads, original_image=image).numpy()],
        "ResizeNearestNeighborGrad": lambda: [raw.ResizeNearestNeighborGrad(grads=grads, size=[32, 32]).numpy()],
        "MaxPoolGrad": lambda: [raw.MaxPoolGrad(orig_input=pool_in, orig_output=pooled, grad=pooled,
                                                ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1], padding="VALID").numpy()],
        "Conv2DBackpropFilter": lambda: [raw.Conv2DBackpropFilter(
            input=image, filter_sizes=[3, 3, 16, 32], out_backprop=conv_out_grad, strides=[1, 1, 1, 1],
            padding="SAME").numpy()],
        "Conv2DBackpropInput": lambda: [raw.Conv2DBackpropInput(
            input_sizes=[8, 32, 32, 16], filter=filt, out_backprop=conv_out_grad, strides=[1, 1, 1, 1],
            padding="SAME").numpy()],
        "Bincount": lambda: [raw.Bincount(arr=ids, size=rows, weights=tf.reshape(data, [-1])[:n]).numpy()],
        "AddN": lambda: [raw.AddN(inputs=addends).numpy()],
    }


def measure(device: str, runs: int, determinism: bool) -> dict:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    if determinism:
        tf.config.experimental.enable_op_determinism()
    if device == "cpu":
        tf.config.set_visible_devices([], "GPU")
    out = {}
    with tf.device("/device:GPU:0" if device == "gpu" else "/device:CPU:0"):
        for name, run in cases(tf, np).items():
            try:
                run()  # warm up (and autotune)
                digests, times = set(), []
                for _ in range(runs):
                    start = time.perf_counter()
                    arrays = run()
                    times.append(time.perf_counter() - start)
                    digests.add(hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)).hexdigest())
                out[name] = {"distinct": len(digests), "ms": 1e3 * statistics.median(times)}
            except Exception as exc:  # noqa: BLE001 - what TensorFlow raises is the finding
                said = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", str(exc)).splitlines()[0]
                out[name] = {"raises": f"raises {type(exc).__name__}: {said[:110]}"}
    return out


def table(plain: dict, det: dict, runs: int, device: str) -> str:
    lines = [f"| op ({device}) | alone: distinct in {runs} | under enable_op_determinism | ms plain | ms switch | "
             f"switch / plain |", "| --- | --- | --- | --- | --- | --- |"]
    for name, p in plain.items():
        d = det.get(name, {})
        varies = p.get("raises") or f"{p['distinct']}" + (" (varies)" if p["distinct"] > 1 else "")
        switch = d.get("raises") or f"{d['distinct']}" + (" (varies)" if d["distinct"] > 1 else " (deterministic)")
        ratio = f"{d['ms'] / p['ms']:.2f}x" if "ms" in d and "ms" in p else "—"
        lines.append(f"| {name} | {varies} | {switch} | {p.get('ms', float('nan')):.3g} | "
                     f"{d.get('ms', float('nan')):.3g} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--child", choices=["plain", "determinism"], help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print(json.dumps(measure(a.device, a.runs, a.child == "determinism")))
        return
    results = {}
    for child in ("plain", "determinism"):  # the switch is global: each variant in its own process
        done = subprocess.run([sys.executable, __file__, "--device", a.device, "--runs", str(a.runs), "--child", child],
                              capture_output=True, text=True, check=True)
        results[child] = json.loads(done.stdout.strip().splitlines()[-1])
    print(table(results["plain"], results["determinism"], a.runs, a.device))


if __name__ == "__main__":
    main()
