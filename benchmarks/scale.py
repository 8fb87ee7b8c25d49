"""How `opbisect trace` scales with the size of the step: wall time against the plain process, at several sizes.

The step is a raw-TensorFlow deep MLP trained with SGD (about 24 ops per layer in the traced graph: forward,
gradient, update). For each depth, side by side in one run:
  plain:    a fresh process that imports TensorFlow, builds the model, traces the step and runs it 16 times
            (the first call and 15 steps), what the user's own script costs;
  opbisect: a fresh process running `opbisect trace --runs 5 --no-replay` on the same script.
Both are wall times of the whole process. The record's `meta.timings` says where opbisect's time goes.

    .venv/bin/python benchmarks/scale.py --layers 40 400 1200
    python benchmarks/scale.py --script examples/resnet50.py --device gpu   # any target script, any form

With --script the plain process loads the target as opbisect does (the model/data form: the model's own train
step) and calls its step 16 times on its inputs.

    .venv/bin/python benchmarks/scale.py --layers 25 60 125 250 400 --fingerprints farmhash,fused --repeats 5

--fingerprints traces each script with each choice (`opbisect trace --fingerprint`): the plain process and every
choice in turn, --repeats rounds, the median of each. It shows where a CPU step's digest should change from
farmhash to the fused op (capture/fingerprint.py, FUSED_ON_CPU_FROM_TAPS), by the lean taps each step has.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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


PLAIN_TARGET = """
import sys
from pathlib import Path

import tensorflow as tf
from opbisect.execute.prepared import setup_tensorflow
from opbisect.targets.loader import importable, load_target

setup_tensorflow(sys.argv[2])
path = Path(sys.argv[1])
with importable(path):
    target = load_target(path)
    args = target.make_inputs()
    for _ in range(16):
        out = target.step(*args)
        tf.nest.map_structure(lambda t: t.numpy(), out)
"""


def wall(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, check=False, capture_output=True, text=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
                               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})
    if done.returncode not in (0, 1):  # 0 and 1 are verdicts; anything else is no timing
        raise RuntimeError(f"{argv[:4]} exited {done.returncode}: {done.stderr[-2000:]}")
    return time.perf_counter() - start


def measure(script: Path, tmp: Path, device: str, plain_code: str, choices: tuple = (("auto",), 1)) -> list[dict]:
    """A row per --fingerprint choice: the plain process and `opbisect trace` with each choice in turn, `repeats`
    rounds (each time the median): in turn, so that the machine's hour moves every choice alike."""
    fingerprints, repeats = choices
    times = {name: [] for name in ("plain", *fingerprints)}
    for _ in range(repeats):
        times["plain"].append(wall([sys.executable, "-c", plain_code, str(script), device]))
        for fingerprint in fingerprints:
            times[fingerprint].append(wall([sys.executable, "-m", "opbisect", "trace", str(script), "--runs", "5",
                                            "--no-replay", "--no-progress", "--device", device,
                                            "--out", str(tmp / fingerprint), "--fingerprint", fingerprint]))
    plain = statistics.median(times["plain"])
    return [_row(script, json.loads((tmp / f / script.stem / "record.json").read_text()), plain,
                 statistics.median(times[f])) for f in fingerprints]


def _row(script: Path, record: dict, plain: float, ours: float) -> dict:
    return {"script": script.name, "ops": record["meta"]["ops"], "plain_s": plain, "opbisect_s": ours,
            "ratio": ours / plain, "timings": record["meta"]["timings"], "device": record["meta"]["device"],
            "taps": len(record["analyses"][0]["instrumented"]["taps"]), "fingerprint": record["meta"]["fingerprint"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[40, 400])
    parser.add_argument("--script", type=Path, nargs="+", help="target scripts instead of the deep MLP")
    parser.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--fingerprints", default="auto", help="comma-separated --fingerprint choices, each traced")
    parser.add_argument("--repeats", type=int, default=1, help="traces of each script and choice: their median")
    args = parser.parse_args()
    print("| step | ops | taps | fingerprint | device | plain process s | opbisect trace --runs 5 s | ratio | "
          "largest stages (s) |")
    print("| --- | ---: | ---: | --- | --- | ---: | ---: | ---: | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        if args.script:
            cases = [(script.resolve(), PLAIN_TARGET) for script in args.script]
        else:
            cases = []
            for layers in args.layers:
                script = Path(tmp) / f"mlp_{layers}.py"
                script.write_text(SCRIPT.format(layers=layers))
                cases.append((script, PLAIN))
        for script, plain_code in cases:
            for r in measure(script, Path(tmp), args.device, plain_code,
                             (args.fingerprints.split(","), args.repeats)):
                top = sorted(r["timings"].items(), key=lambda kv: -kv[1])[:3]
                stages = "; ".join(f"{k} {v:.1f}" for k, v in top)
                print(f"| {r['script']} | {r['ops']} | {r['taps']} | {r['fingerprint']} | {r['device']} | "
                      f"{r['plain_s']:.1f} | {r['opbisect_s']:.1f} | {r['ratio']:.2f} | {stages} |", flush=True)


if __name__ == "__main__":
    main()
