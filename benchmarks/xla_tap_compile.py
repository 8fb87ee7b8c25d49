"""Where an XLA step's instrumented first call goes: the instrumented step as opbisect builds it (the taps digested
inside the jit-compiled function), against the same function returning the raw tapped tensors, digested after it.
If the raw taps' first call costs nearly as much, XLA compiling the step with every tap as an output is the cost,
not the digests.

    OPBISECT_XLA=1 python benchmarks/xla_tap_compile.py examples/bert_like_fit.py --device cpu
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script", type=Path)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.script.resolve().parent))  # the example's own imports

    from opbisect.execute.prepared import setup_tensorflow

    tf, _ = setup_tensorflow(args.device)
    from opbisect.capture import builder, fingerprint, importer
    from opbisect.capture import taps as capture
    from opbisect.targets.loader import load_target
    from opbisect.trace.trace import trace_step

    target = load_target(args.script)
    batch = target.make_inputs()
    trace = trace_step(target, batch)
    if not trace.jit_compile:
        print("the step does not compile with XLA (OPBISECT_XLA=1 makes the examples do)")
        return 2
    taps, _ = builder.tappable_tensors(trace)
    fp = fingerprint.WeightedSumFingerprinter()

    start = time.perf_counter()
    capture.build(trace, taps, fp)(batch)
    digested_inside = time.perf_counter() - start

    start = time.perf_counter()
    b, tapped, _, _, _ = capture.instrumented_graph_def(trace, fp, capture.Wanted(taps, grouped=True))
    importer = importer.step_importer(trace, b.gd, b.register, list(tapped))
    raw = tf.function(lambda *feeds: importer(*feeds), autograph=False, jit_compile=True)
    outputs = raw(*trace.flat_args(batch))
    raw_first = time.perf_counter() - start
    tf.function(lambda ts: fp.many(list(ts)), autograph=False)(outputs)
    digested_after = time.perf_counter() - start

    print(f"{args.script.name}: {len(taps)} taps; first call of the instrumented step {digested_inside:.1f} s "
          f"(digests inside the XLA function); raw taps returned by the XLA function {raw_first:.1f} s, "
          f"{digested_after:.1f} s with their digests made after it")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
