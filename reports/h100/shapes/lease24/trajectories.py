"""Lease 24's six fresh 100-step runs of BERT-base mixed under the fusion switch, each pair compared: the first step
after which their variables differ (None: never in 100). Run from the project root:
    .venv/bin/python reports/h100/shapes/lease24/trajectories.py > reports/h100/shapes/lease24/trajectories.txt"""

import gzip
import itertools
import json
from pathlib import Path

HERE = Path(__file__).parent
RUNS = {"ws_a (2 ops, cuBLAS workspaces)": "ws100a", "ws_b (2 ops, cuBLAS workspaces)": "ws100b",
        "par_a (4 ops, at once)": "patch4/p4_a", "par_b (4 ops, at once)": "patch4/p4_b",
        "seq_a (4 ops, in turn)": "patch4b/p4_a", "seq_b (4 ops, in turn)": "patch4b/p4_b"}


def steps(name: str) -> list[dict]:
    probe = json.loads(gzip.open(HERE / f"{name}.json.gz").read())
    return [probe["initial"], *probe["after"]]


def first_apart(a: list[dict], b: list[dict]) -> int | None:
    return next((step for step, (x, y) in enumerate(zip(a, b)) if x != y), None)


runs = {label: steps(name) for label, name in RUNS.items()}
for (a, x), (b, y) in itertools.combinations(runs.items(), 2):
    print(f"{a:<34}{b:<34}{first_apart(x, y)}")
