"""The cost of the fresh-process check: a whole `opbisect trace` with it (the default) against the same trace with
`--no-fresh-check`, and the check's probe alone (`--no-script-check`: without the script's two more runs that a
deterministic step's verdict now ends on), wall times of fresh processes side by side in one run (in turn, so a
drift of the machine's speed falls on both), on the shipped examples whose two fresh processes agree (where they
differ, the check goes on to its experiment, which is the answer, not overhead). With `--false-positives N`, each
seeded twin of examples/fresh/ is traced N more times: none may say its fresh processes (or its runs) differ.

    .venv/bin/python benchmarks/fresh_check.py [--repeats 3] [--false-positives 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = {  # script: its arguments (the fresh twins: the flag that seeds them)
    "embedding_sgd.py": [], "grad_accumulation.py": [], "scatter_segment_resize.py": [], "fit_epochs.py": [],
    "bert_like.py": [], "zero_edit/keras3_fit.py": ["--epochs", "3"], "zero_edit/tf_keras_fit.py": ["2"],
    "zero_edit/custom_loop.py": ["--epochs", "2"], "zero_edit/custom_train_step.py": [],
    "fresh/keras3_tutorial_seeds.py": ["--seeded"], "fresh/set_vocabulary.py": ["--sorted"],
    "fresh/parallel_map.py": ["--deterministic"],
}
TWINS = {"fresh/keras3_tutorial_seeds.py": "--seeded", "fresh/tf_keras_tutorial_seeds.py": "--seeded",
         "fresh/custom_loop_unseeded.py": "--seeded", "fresh/set_vocabulary.py": "--sorted",
         "fresh/unseeded_shuffle.py": "--seeded", "fresh/parallel_map.py": "--deterministic"}


def trace(script: str, args: list[str], out: str, *flags: str) -> tuple[float, dict]:
    """Seconds of a whole `opbisect trace --runs 5 --no-replay` in a fresh process, and its fresh-process check."""
    cmd = [sys.executable, "-m", "opbisect", "trace", str(ROOT / "examples" / script), "--runs", "5", "--no-replay",
           "--no-progress", "--out", out, *flags, *(["--", *args] if args else [])]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{script} failed ({done.returncode}): {done.stderr[-2000:]}")
    record = json.loads((Path(out) / Path(script).stem / "record.json").read_text())
    return seconds, record.get("fresh") or {}


def cost(repeats: int) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for script, args in EXAMPLES.items():
            checked, probed, unchecked, apart, ran = [], [], [], False, False
            for _ in range(repeats):
                seconds, fresh = trace(script, args, tmp)
                checked.append(seconds)
                apart = apart or bool(fresh.get("init") or fresh.get("batches"))
                ran = ran or fresh.get("script") is not None
                probed.append(trace(script, args, tmp, "--no-script-check")[0])
                unchecked.append(trace(script, args, tmp, "--no-fresh-check")[0])
            rows.append({"script": script, "without": statistics.median(unchecked), "probe": statistics.median(probed),
                         "with": statistics.median(checked), "apart": apart, "script_runs": ran})
            print(f"{script}: {rows[-1]['without']:.1f} s -> {rows[-1]['probe']:.1f} s -> {rows[-1]['with']:.1f} s",
                  file=sys.stderr)
    return rows


def false_positives(runs: int) -> dict[str, int]:
    said = {}
    with tempfile.TemporaryDirectory() as tmp:
        for script, flag in TWINS.items():
            said[script] = sum(bool(fresh.get("init") or fresh.get("batches") or fresh.get("first_differing_step")
                                    or (fresh.get("script") or {"agreed": True})["agreed"] is False)
                               for fresh in (trace(script, [flag], tmp)[1] for _ in range(runs)))
            print(f"{script} {flag}: {said[script]} of {runs} said apart", file=sys.stderr)
    return said


def table(rows: list[dict], repeats: int) -> None:
    print("| example | --no-fresh-check (s) | --no-script-check (s) | ratio | trace (s) | ratio | the script's runs |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        note = " (processes apart: the experiment ran)" if r["apart"] else ""
        print(f"| {r['script']} | {r['without']:.1f} | {r['probe']:.1f} | {r['probe'] / r['without']:.2f}x | "
              f"{r['with']:.1f} | {r['with'] / r['without']:.2f}x | {'ran' if r['script_runs'] else '-'}{note} |")
    for key, what in (("probe", "the probe alone (--no-script-check)"), ("with", "the default trace")):
        ratios = [r[key] / r["without"] for r in rows if not r["apart"]]
        print(f"\n{what} / --no-fresh-check, median of {repeats} each, in turn, over the examples whose processes "
              f"agree: {min(ratios):.2f}-{max(ratios):.2f}x, median {statistics.median(ratios):.2f}x")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="timings of each example (0: none)")
    parser.add_argument("--false-positives", type=int, default=0, help="traces of each seeded twin")
    args = parser.parse_args(argv)
    if args.repeats:
        table(cost(args.repeats), args.repeats)
    if args.false_positives:
        said = false_positives(args.false_positives)
        print(f"\nseeded twins, {args.false_positives} traces each: "
              + ", ".join(f"{k} {v}/{args.false_positives}" for k, v in said.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
