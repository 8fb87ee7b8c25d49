"""What XLA compiled a step into, from its HLO dump: the instructions XLA's docs name as able to vary run to run
on a GPU (scatter, select-and-scatter, GEMMs, convolutions, attention), counted per compiled module.

Capture cannot name an op inside what XLA compiled when its taps change what XLA fuses and picks; this census says
which of XLA's own ops the step holds, so that a variation left after the patch can be pinned to a kind of op by
experiment (XLA's switch on or off, verify's `XLA_FLAGS` variants).

    XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_as_text" python3 -m opbisect verify ... --no-switches
    python3 benchmarks/xla_census.py DIR          # one row per module, the largest first
    python3 benchmarks/xla_census.py DIR --atomics  # each kernel whose PTX adds floats atomically, its TF op

A kernel whose PTX adds floats with atomics sums in whatever order its threads arrive: it can vary run to run in one
process. cuBLAS' GEMMs are library calls, not in the PTX: the census counts them, --atomics cannot look inside.
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
    "Triton fusion": r'"kind":"__triton"',  # a softmax or normalization XLA hands to Triton
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


# a float add done atomically, in any of PTX's spellings (atom/red, .global, .relaxed.gpu, .noftz, packed halves)
FLOAT_ATOMIC_ADD = re.compile(r"\b(?:atom|red)\.[\w.]*?add[\w.]*?\.(?:f16x2|bf16x2|f16|bf16|f32|f64)\b")
COMPARE_AND_SWAP = re.compile(r"\batom\.[\w.]*?cas\.")  # the loop XLA writes for an atomic it has no instruction for
ENTRY = re.compile(r"^\s*\.(?:visible\s+)?\.?entry\s+([\w$]+)\s*\(", re.M)
HLO_LINE = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*\S+.*?\b(\w[\w-]*)\(.*$", re.M)
METADATA = re.compile(r'metadata=\{[^}]*?op_type="([^"]*)"[^}]*?op_name="([^"]*)"')


def kernels_with_atomics(ptx: str) -> dict[str, tuple[int, int]]:
    """Each kernel (.entry) of a PTX text with its float atomic adds and compare-and-swap loops, where it has any."""
    starts = [(m.start(), m.group(1)) for m in ENTRY.finditer(ptx)] + [(len(ptx), "")]
    found = {}
    for (start, name), (end, _) in zip(starts, starts[1:]):
        body = ptx[start:end]
        adds, swaps = len(FLOAT_ATOMIC_ADD.findall(body)), len(COMPARE_AND_SWAP.findall(body))
        if adds or swaps:
            found[name] = (adds, swaps)
    return found


def hlo_instructions(hlo: str) -> dict[str, dict]:
    """Each instruction of an HLO text by its name as a kernel spells it ('.' and '-' as '_'): its opcode and the
    TF op it came from (metadata), where it has them."""
    table = {}
    for m in HLO_LINE.finditer(hlo):
        meta = METADATA.search(m.group(0))
        table[re.sub(r"[.\-]", "_", m.group(1))] = {"hlo": m.group(2), "op_type": meta.group(1) if meta else "",
                                                     "op_name": meta.group(2) if meta else ""}
    return table


def atomics(folder: Path) -> pd.DataFrame:
    """One row per compiled kernel that adds floats atomically: its module, kernel, counts, and the TF op."""
    rows = []
    for ptx in sorted(folder.glob("*.ptx")):
        hlo = next(iter(sorted(folder.glob(ptx.name.split(".")[0] + ".*after_optimizations.txt"))), None)
        table = hlo_instructions(hlo.read_text(errors="replace")) if hlo else {}
        module = ptx.name.split(".")[1] if ptx.name.count(".") > 1 else ptx.stem
        for kernel, (adds, swaps) in kernels_with_atomics(ptx.read_text(errors="replace")).items():
            known = table.get(kernel, {"hlo": "", "op_type": "", "op_name": ""})
            rows.append({"module": module.split("__XlaMustCompile")[0], "kernel": kernel, "float atomic adds": adds,
                         "compare-and-swap": swaps, **known})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the --xla_dump_to folder")
    parser.add_argument("--top", type=int, default=6, help="the largest modules shown")
    parser.add_argument("--atomics", action="store_true", help="the kernels whose PTX adds floats atomically")
    args = parser.parse_args()
    if args.atomics:
        table = atomics(args.folder)
        with pd.option_context("display.max_colwidth", 120, "display.width", 250):
            print(table.to_string(index=False) if len(table) else f"no float atomics in the PTX under {args.folder}")
        return
    table = census(args.folder)
    print(table.head(args.top).to_string(index=False) if len(table) else f"no optimized HLO under {args.folder}")


if __name__ == "__main__":
    main()
