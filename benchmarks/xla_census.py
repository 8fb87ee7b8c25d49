"""What XLA compiled a step into, from its HLO dump: the instructions XLA's docs name as able to vary run to run
on a GPU (scatter, select-and-scatter, GEMMs, convolutions, attention), counted per compiled module.

Capture cannot name an op inside what XLA compiled when its taps change what XLA fuses and picks; this census says
which of XLA's own ops the step holds, so that a variation left after the patch can be pinned to a kind of op by
experiment (XLA's switch on or off, verify's `XLA_FLAGS` variants).

    XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_as_text" python3 -m opbisect verify ... --no-switches
    python3 benchmarks/xla_census.py DIR          # one row per module, the largest first
    python3 benchmarks/xla_census.py DIR --atomics  # each kernel whose PTX adds floats atomically, its TF op
    python3 benchmarks/xla_census.py DIR --scatters # each scatter fusion, its TF op, whether its indices are an iota

A kernel whose PTX adds floats with atomics sums in whatever order its threads arrive: it can vary run to run in one
process, unless each element gets one add (a scatter whose indices are an iota: `iota indices`). cuBLAS' GEMMs are
library calls, not in the PTX: the census counts them, --atomics cannot look inside.
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
    # a GEMM XLA hands to Triton: its fusion kind in older XLA, its instruction's name (gemm_fusion_dot.N) in TF 2.21's
    "Triton GEMM": r'(?m)"kind":"__triton_gemm"|^\s*(?:ROOT\s+)?%?gemm_fusion[\w.\-]*\s*=',
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


# an atomic instruction (atom/red) with its qualifiers in whatever order PTX spells them (.global, .relaxed.gpu,
# .noftz, a vector's .v4, the L2 cache hint): a float add where it has .add and a float type, a compare-and-swap (the
# loop XLA writes for an atomic it has no instruction for) where it has .cas
ATOMIC = re.compile(r"\b(?:atom|red)((?:\.[\w:]+)+)")
FLOATS = {"f16", "bf16", "f16x2", "bf16x2", "f32", "f64"}
ENTRY = re.compile(r"^\s*\.(?:visible\s+)?\.?entry\s+([\w$]+)\s*\(", re.M)
HLO_LINE = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*\S+.*?\b(\w[\w-]*)\(.*$", re.M)
METADATA = re.compile(r'metadata=\{[^}]*?op_type="([^"]*)"[^}]*?op_name="([^"]*)"')
CALLS = re.compile(r"\bcalls=%?([\w.\-]+)")
COMPUTATION = re.compile(r"^%?([\w.\-]+)\s*\(.*?\)\s*->.*?\{\n(.*?)^\}", re.M | re.S)
SCATTER_OPERANDS = re.compile(r"\sscatter\(([^)]*)\)")


def kernels_with_atomics(ptx: str) -> dict[str, tuple[int, int]]:
    """Each kernel (.entry) of a PTX text with its float atomic adds and compare-and-swap loops, where it has any."""
    starts = [(m.start(), m.group(1)) for m in ENTRY.finditer(ptx)] + [(len(ptx), "")]
    found = {}
    for (start, name), (end, _) in zip(starts, starts[1:]):
        qualifiers = [set(m.group(1).split(".")) for m in ATOMIC.finditer(ptx, start, end)]
        adds = sum(1 for q in qualifiers if "add" in q and q & FLOATS)
        swaps = sum(1 for q in qualifiers if "cas" in q)
        if adds or swaps:
            found[name] = (adds, swaps)
    return found


def iota_indices(body: str) -> bool:
    """Whether the scatter in a computation's text takes its indices from an iota: each index once, so each element
    gets one atomic add and no order to vary in (Keras' position embedding: its ids are arange(length))."""
    found = SCATTER_OPERANDS.search(body)
    names = re.findall(r"%([\w.\-]+)", found.group(1)) if found else []
    return len(names) > 1 and re.search(rf"^\s*%?{re.escape(names[1])}\s*=\s*\S+\s+iota\(", body, re.M) is not None


def hlo_instructions(hlo: str) -> dict[str, dict]:
    """Each instruction of an HLO text by its name as a kernel spells it ('.' and '-' as '_'): its opcode, the TF op
    it came from (metadata) where it has one, whether it runs a scatter (itself, or in the computation it calls) and
    whether that scatter has an iota's indices."""
    bodies = {m.group(1): m.group(2) for m in COMPUTATION.finditer(hlo)}
    table = {}
    for m in HLO_LINE.finditer(hlo):
        meta, calls = METADATA.search(m.group(0)), CALLS.search(m.group(0))
        body = bodies.get(calls.group(1), "") if calls else m.group(0)
        element = re.search(r"=\s*\(?(\w+)\[", m.group(0))  # a tuple's first element for a multi-output fusion
        table[re.sub(r"[.\-]", "_", m.group(1))] = {"hlo": m.group(2), "type": element.group(1) if element else "",
                                                     "op_type": meta.group(1) if meta else "",
                                                     "op_name": meta.group(2) if meta else "",
                                                     "scatter": SCATTER_OPERANDS.search(body) is not None,
                                                     "iota indices": iota_indices(body)}
    return table


def scatters(folder: Path) -> pd.DataFrame:
    """One row per fusion that runs a scatter, from the optimized HLO alone (no PTX): its TF op and whether its
    indices are an iota."""
    rows = []
    for path in sorted(folder.glob("*after_optimizations.txt")):
        module = path.name.split(".")[1].split("__XlaMustCompile")[0]
        rows += [{"module": module, "kernel": name, **row}
                 for name, row in hlo_instructions(path.read_text(errors="replace")).items()
                 if row["hlo"] == "fusion" and row["scatter"]]
    return pd.DataFrame(rows)


def atomics(folder: Path) -> pd.DataFrame:
    """One row per compiled kernel that adds floats atomically: its module, kernel, counts, and the TF op."""
    rows = []
    for ptx in sorted(folder.glob("*.ptx")):
        hlo = next(iter(sorted(folder.glob(ptx.name.split(".")[0] + ".*after_optimizations.txt"))), None)
        table = hlo_instructions(hlo.read_text(errors="replace")) if hlo else {}
        module = ptx.name.split(".")[1] if ptx.name.count(".") > 1 else ptx.stem
        for kernel, (adds, swaps) in kernels_with_atomics(ptx.read_text(errors="replace")).items():
            known = table.get(kernel, {"hlo": "", "type": "", "op_type": "", "op_name": "", "scatter": False,
                                       "iota indices": False})
            rows.append({"module": module.split("__XlaMustCompile")[0], "kernel": kernel, "float atomic adds": adds,
                         "compare-and-swap": swaps, **known})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the --xla_dump_to folder")
    parser.add_argument("--top", type=int, default=6, help="the largest modules shown")
    parser.add_argument("--atomics", action="store_true", help="the kernels whose PTX adds floats atomically")
    parser.add_argument("--scatters", action="store_true", help="every scatter fusion, from the HLO alone")
    args = parser.parse_args()
    if args.atomics or args.scatters:
        table = atomics(args.folder) if args.atomics else scatters(args.folder)
        none = "no float atomics in the PTX" if args.atomics else "no scatter fusion in the HLO"
        with pd.option_context("display.max_colwidth", 120, "display.width", 250):
            print(table.to_string(index=False) if len(table) else f"{none} under {args.folder}")
        return
    table = census(args.folder)
    print(table.head(args.top).to_string(index=False) if len(table) else f"no optimized HLO under {args.folder}")


if __name__ == "__main__":
    main()
