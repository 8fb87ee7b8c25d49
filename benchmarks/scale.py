"""How `opbisect trace` scales with the size of the step: wall time against the plain process, at several sizes.

The step is a raw-TensorFlow deep MLP trained with SGD (about 24 ops per layer in the traced graph: forward,
gradient, update). For each depth, side by side in one run:
  plain:    a fresh process that imports TensorFlow, builds the model, traces the step and runs it 16 times
            (the first call and 15 steps), what the user's own script costs;
  opbisect: a fresh process running `opbisect trace --runs 5 --no-replay` on the same script.
Both are wall times of the whole process. The record's `meta.timings` says where opbisect's time goes.

    .venv/bin/python benchmarks/scale.py --layers 40 400 1200
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import tensorflow as tf

tf.random.set_seed(0)
LAYERS, WIDTH = {layers}, 32
weights = [(tf.Variable(tf.random.normal([WIDTH, WIDTH], stddev=0.1), name=f"w{{i}}"),
            tf.Variable(tf.zeros([WIDTH]), name=f"b{{i}}")) for i in range(LAYERS)]


@tf.function
def step(x, y):
    with tf.GradientTape() as tape:
        h = x
        for w, b in weights:
            h = tf.nn.relu(tf.matmul(h, w) + b)
        loss = tf.reduce_mean((h - y) ** 2)
    variables = [v for pair in weights for v in pair]
    for v, g in zip(variables, tape.gradient(loss, variables)):
        v.assign_sub(0.01 * g)
    return loss


inputs = (tf.random.stateless_normal([64, WIDTH], seed=[1, 2]), tf.random.stateless_normal([64, WIDTH], seed=[3, 4]))
"""

PLAIN = """
import runpy, sys
script = runpy.run_path(sys.argv[1])
for _ in range(16):
    script["step"](*script["inputs"]).numpy()
"""


def wall(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=False, capture_output=True, env={"TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin",
                                                               "PYTHONPATH": str(ROOT)})
    return time.perf_counter() - start


def measure(layers: int, tmp: Path) -> dict:
    script = tmp / f"mlp_{layers}.py"
    script.write_text(SCRIPT.format(layers=layers))
    plain = wall([sys.executable, "-c", PLAIN, str(script)])
    ours = wall([sys.executable, "-m", "opbisect", "trace", str(script), "--runs", "5", "--no-replay",
                 "--no-progress", "--out", str(tmp)])
    record = json.loads((tmp / script.stem / "record.json").read_text())
    return {"layers": layers, "ops": record["meta"]["ops"], "plain_s": plain, "opbisect_s": ours,
            "ratio": ours / plain, "timings": record["meta"]["timings"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[40, 400])
    args = parser.parse_args()
    print("| layers | ops | plain process s | opbisect trace --runs 5 s | ratio | largest stages (s) |")
    print("| ---: | ---: | ---: | ---: | ---: | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for layers in args.layers:
            r = measure(layers, Path(tmp))
            top = sorted(r["timings"].items(), key=lambda kv: -kv[1])[:3]
            stages = "; ".join(f"{k} {v:.1f}" for k, v in top)
            print(f"| {layers} | {r['ops']} | {r['plain_s']:.1f} | {r['opbisect_s']:.1f} | {r['ratio']:.2f} | "
                  f"{stages} |", flush=True)


if __name__ == "__main__":
    main()
