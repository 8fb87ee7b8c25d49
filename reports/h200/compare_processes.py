"""Compare the uninstrumented step's final state between two `opbisect trace` records made in two processes."""

import sys

from opbisect.report import load

first, second = load(sys.argv[1]), load(sys.argv[2])
a, b = first.default, second.default
print(f"process 1: {a.distinct()} distinct result(s) in {len(a.after)} runs; "
      f"process 2: {b.distinct()} in {len(b.after)} runs")
differ = sorted(k for k in a.after[0] if a.after[0][k] != b.after[0].get(k))
outputs = a.outputs[0] != b.outputs[0]
print(f"across the two processes: {len(differ)} of {len(a.after[0])} variables differ after the step"
      + (f" ({', '.join(differ)})" if differ else "") + ("; the outputs differ" if outputs else "; the outputs agree"))
