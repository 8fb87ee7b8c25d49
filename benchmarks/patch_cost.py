"""The cost table of issue 10: per step, each variant's time as a ratio to the plain step, beside its verdict.

The measurement is `opbisect verify` itself (plain and patched side by side in one process, the switches each in
a fresh process from the same state): `bash reports/h200/run_verify.sh verify1|verify2|again` on the H200, or
`opbisect verify <example> --patch <its CSV>` anywhere. This script only renders the verify folders' records:

    python benchmarks/patch_cost.py reports/h200

A ratio in brackets is its 95% bootstrap interval (verify's records from version 2 on, `--timing-runs`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

COLUMNS = ("patched", "global switch")


def _cell(v: dict | None) -> str:
    if v is None:
        return "-"
    if v["error"]:
        return "raised"
    same = "same bits" if v["runs"] >= 2 and v["distinct"] == 1 else f"{v['distinct']}/{v['runs']} differ"
    interval = f" [{v['ratio_low']:.2f}-{v['ratio_high']:.2f}]" if v.get("ratio_low") is not None else ""
    return f"{v['ratio']:.2f}x{interval} ({same})"


def rows(folder: Path) -> list[str]:
    out = []
    for path in sorted(folder.glob("*-verify/verification.json")):
        record = json.loads(path.read_text())
        by_name = {v["name"]: v for v in record["variants"]}
        family = [v for n, v in by_name.items() if n not in ("plain", *COLUMNS)]
        out.append("| " + " | ".join([
            path.parent.name.removesuffix("-verify"), f"{by_name['plain']['step_ms']:.2f}",
            str(len(record["replaced"])), *(_cell(by_name.get(c)) for c in COLUMNS),
            "; ".join(f"{v['name']}: {_cell(v)}" for v in family) or "-", record["recommendation"] or "none"]) + " |")
    return out


def main(argv: list[str]) -> int:
    folder = Path(argv[0] if argv else "reports/h200")
    print("| step | plain ms | ops patched | patched / plain | global switch / plain | family switches / plain "
          "| cheapest bitwise reproducible |")
    print("| --- | ---: | ---: | --- | --- | --- | --- |")
    for line in rows(folder):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
