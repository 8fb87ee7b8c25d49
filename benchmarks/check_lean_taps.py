"""Lean taps checked on a real step (a check, not a benchmark): every tensor fingerprinted in N runs from one state,
then compared twice, whole and with the element-wise outputs left out as `opbisect trace` leaves them out
(capture.builder.tappable_tensors): the same sources (op, kind, differing outputs), or the difference is printed.
Exit 0 when the two agree, 1 when they do not. Each source's count of differing ops after it is printed both ways:
derived, it counts a tensor whose difference vanished inside an element-wise op (an update below the variable's
precision) as differing, so it may be larger.

    python benchmarks/check_lean_taps.py examples/scatter_segment_resize.py [--device gpu] [--runs 5]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from capture_overhead import ROOT, _bytes, setup, sync_outputs  # noqa: E402,F401 - ROOT on sys.path first


def fingerprints_of_every_tensor(trace, args, kind: str, runs: int) -> tuple[list[str], list[list[int]]]:
    """Every tensor's digest in each of `runs` runs, each from the variables' values before the first."""
    from opbisect.capture import builder
    from opbisect.capture import taps as capture

    every = builder.tappable_tensors(builder.every_tensor_tapped(trace))[0]
    inst = capture.build(trace, every, capture.fingerprinter_for(trace, kind)[0])
    start = {k: v.numpy() for k, v in trace.variables.items()}
    fps = []
    for _ in range(runs):
        for k, v in trace.variables.items():
            v.assign(start[k])
        fps.append([int(d) for d in inst(args)[0]])
    return every, fps


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("script", type=Path)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args()
    from opbisect.analysis.compare import compare
    from opbisect.capture import builder
    from opbisect.execute.experiment import result_tensors

    tf, kind, target, args, trace = setup(a.script, a.device)
    every, fps = fingerprints_of_every_tensor(trace, args, kind, a.runs)
    lean = builder.tappable_tensors(trace)[0]
    kept = [every.index(t) for t in lean]
    results, before = result_tensors(trace), [{}] * a.runs
    whole = compare(trace.graph, every, fps, before, results)
    leaner = compare(trace.graph, lean, [[run[i] for i in kept] for run in fps], before, results)
    mb = [sum(_bytes(trace.graph, t) for t in taps) / 1e6 for taps in (every, lean)]
    print(f"{a.script.name} on {kind}, {a.runs} runs: every tensor {len(every)} taps ({mb[0]:.0f} MB), lean "
          f"{len(lean)} taps ({mb[1]:.0f} MB); {len(whole.differing)} tapped tensors differ")
    for name, c in (("every tensor", whole), ("lean", leaner)):
        print(f"  {name}: {len(c.sources)} source(s): " + "; ".join(
            f"{s.op} ({trace.graph.op_type(s.op)}) kind={s.kind} after={s.downstream_differing} "
            f"result={s.affects_result}" for s in c.sources))
    same = [(s.op, s.kind, s.tensors) for s in whole.sources] == [(s.op, s.kind, s.tensors) for s in leaner.sources]
    print("SAME: lean taps give the sources every tensor gives" if same else "DIFFERENT")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
