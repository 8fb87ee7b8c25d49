"""What XLA compiled a step into, from its HLO dump: the instructions XLA's docs name as able to vary run to run
on a GPU (scatter, select-and-scatter, GEMMs, convolutions, attention), counted per compiled module.

Capture cannot name an op inside what XLA compiled when its taps change what XLA fuses and picks; this census says
which of XLA's own ops the step holds, so that a variation left after the patch can be pinned to a kind of op by
experiment (XLA's switch on or off, verify's `XLA_FLAGS` variants).

    XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_as_text" python3 -m opbisect verify ... --no-switches
    python3 benchmarks/xla_census.py DIR          # one row per module, the largest first
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pandas as pd

# what XLA's GPU determinism docs name, as it is spelled in optimized HLO text
KINDS = {
    "scatter": r"\sscatter\(",
    "select-and-scatter": r"\sselect-and-scatter\(",
    "cuBLAS GEMM": r'custom_call_target="__cublas\$gemm"',
    "cuBLASLt matmul": r'custom_call_target="__cublas\$lt\$matmul[^"]*"',
    "Triton GEMM": r'"kind":"__triton_gemm"',
    "split-K > 1": r'"split_k":"([2-9]|\d\d+)"',
    "cuDNN conv": r'custom_call_target="__cudnn\$conv[^"]*"',
    "cuDNN attention": r'custom_call_target="__cudnn\$fmha[^"]*"',
    "reduce": r"\sreduce\(",
}


def census(folder: Path) -> pd.DataFrame:
    rows = []
    for path in sorted(folder.glob("*after_optimizations.txt")):
        text = path.read_text(errors="replace")
        name = path.name.split(".")[1] if path.name.count(".") > 2 else path.stem
        row = {"module": name.split("__XlaMustCompile")[0], "lines": text.count("\n")}
        row.update({kind: len(re.findall(pattern, text)) for kind, pattern in KINDS.items()})
        rows.append(row)
    return pd.DataFrame(rows).sort_values("lines", ascending=False) if rows else pd.DataFrame()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the --xla_dump_to folder")
    parser.add_argument("--top", type=int, default=6, help="the largest modules shown")
    args = parser.parse_args()
    table = census(args.folder)
    print(table.head(args.top).to_string(index=False) if len(table) else f"no optimized HLO under {args.folder}")


if __name__ == "__main__":
    main()
