"""The time to a verdict on a script run as it is, against the script itself: wall times of fresh processes, side by
side in one run, for each script of examples/zero_edit/ (or those given):

  plain:    a fresh process that runs the script as `python script ARGS` would up to its training call (the same
            intercept opbisect uses, no analysis), then calls the step taken 16 times (the first call and 15
            steps), what the user's own script costs to get that far and train that long;
  opbisect: a fresh process running `opbisect trace --runs 5 --no-replay script -- ARGS`.

    .venv/bin/python benchmarks/zero_edit.py [--repeats 2]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = {"keras3_fit.py": ["--epochs", "3"], "tf_keras_fit.py": ["2"], "custom_loop.py": ["--epochs", "2"],
           "custom_train_step.py": [], "racy_embedding_loop.py": []}

PLAIN = """
import sys
sys.path.insert(0, {root!r})
import tensorflow as tf
from opbisect.targets.intercept import Point, run_to_training
from opbisect.targets.loader import importable, intercepted_target
from opbisect.targets.script import ScriptRunner

script, args = {script!r}, {args!r}
with importable(script):
    target = intercepted_target(script, run_to_training(ScriptRunner(script, args), Point(), 1))
    inputs = target.make_inputs()
    for _ in range(16):
        tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, target.step(*inputs))
"""


def _seconds(cmd: list[str], cwd: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{cmd[:4]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return time.perf_counter() - start


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, script_args in SCRIPTS.items():
            script = str(ROOT / "examples" / "zero_edit" / name)
            plain, whole = [], []
            for k in range(args.repeats):  # in turn: a drift of the machine's speed falls on both
                plain.append(_seconds([sys.executable, "-c", PLAIN.format(root=str(ROOT), script=script,
                                                                          args=script_args)], tmp))
                whole.append(_seconds([sys.executable, "-m", "opbisect", "trace", script, "--runs", "5",
                                       "--no-replay", "--no-progress", "--out", f"{tmp}/{k}", "--", *script_args], tmp))
            p, w = statistics.median(plain), statistics.median(whole)
            rows.append((name, p, w))
    print(f"{'script':<24} {'plain s':>8} {'opbisect s':>11} {'ratio':>6}")
    for name, p, w in rows:
        print(f"{name:<24} {p:8.2f} {w:11.2f} {w / p:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
