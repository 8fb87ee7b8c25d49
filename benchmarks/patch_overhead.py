"""Where a patched step's extra time comes from: the step as traced, the same graph imported unchanged (the
machinery every patched step runs through, with no op replaced), and the patched step, timed side by side from one
restored state, then each one's device time per kernel from TensorFlow's profiler.

    python benchmarks/patch_overhead.py examples/scatter_add_table.py reports/h200/scatter_add_table/sources.csv \
        --device gpu --steps 60

If "imported" already costs what "patched" does over "plain", the import path is the cost, not the patch.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script", type=Path)
    parser.add_argument("patch", help="what `opbisect verify --patch` takes")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--steps", type=int, default=60, help="timed steps of each, in turn")
    parser.add_argument("--profile-calls", type=int, default=20)
    args = parser.parse_args(argv)

    from benchmarks.device_profile import compared, kernel_times
    from opbisect.execute.variants import ratio_interval, time_steps
    from opbisect.patches.selection import Choice, choose
    from opbisect.patches.step import PatchedStep
    from opbisect.settings import VerifySettings
    from opbisect.targets.loader import importable
    from opbisect.verify import _load

    settings = VerifySettings(script=args.script, patch=args.patch, device=args.device)
    with importable(args.script):
        step = _load(settings)
        step.feed(1)
        inputs = step.batches[0]
        calls = {"plain": step.trace.concrete,
                 "imported": PatchedStep(step.trace, Choice(spec="", ops=[], unmatched=[])),
                 "patched": PatchedStep(step.trace, choose(step.trace.graph, args.patch))}
        for call in calls.values():  # traced, compiled, autotuned
            step.snapshot.restore()
            call(*inputs)
        times = dict(zip(calls, time_steps(list(calls.values()), inputs, step.snapshot.restore, args.steps)))
        print(f"{args.script.name} on {step.kind}, {args.steps} steps each, in turn, from one restored state:")
        for name, t in times.items():
            interval = ratio_interval(t, times["plain"]) if name != "plain" else None
            ratio = np.median(t) / np.median(times["plain"])
            print(f"  {name:9s} median {1e3 * np.median(t):8.3f} ms  {ratio:.3f}x"
                  + (f" [{interval[0]:.3f}-{interval[1]:.3f}]" if interval else ""))
        tables = {name: kernel_times(lambda call=call: call(*inputs), calls=args.profile_calls)
                  for name, call in calls.items()}
        for name, table in tables.items():
            print(f"profile {name}, the top kernels (device time by family below):")
            print(table.head(12).to_string(index=False))
        print(compared(tables))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main(sys.argv[1:]))
