"""Helpers: write a small step script literally, run `opbisect trace` on it in-process, read what it wrote."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

HEADER = """\
import numpy as np
import tensorflow as tf
"""


@dataclasses.dataclass
class Traced:
    code: int
    csv: pd.DataFrame
    lines: list[str]
    record: object
    csv_path: Path

    @property
    def sources(self) -> list[str]:
        return list(self.csv["op_name"])

    def row(self, op_name: str) -> dict:
        return self.csv[self.csv["op_name"] == op_name].iloc[0].to_dict()


def write_script(folder: Path, name: str, body: str) -> Path:
    path = folder / f"{name}.py"
    path.write_text(HEADER + textwrap.dedent(body))
    return path


def trace(path: Path, out: Path, **settings) -> Traced:
    from opbisect.record import store
    from opbisect.session import run_trace
    from opbisect.settings import TraceSettings

    lines: list[str] = []
    settings.setdefault("runs", 4)
    code = run_trace(TraceSettings(script=path, out=out, progress=False, **settings), echo=lines.append)
    folder = out / path.stem
    return Traced(code=code, csv=pd.read_csv(folder / "sources.csv"), lines=lines, record=store.load(folder),
                  csv_path=folder / "sources.csv")


def until_it_fires(run, attempts: int = 3) -> Traced:
    """A real race may not fire in one sample on a loaded machine: repeat the whole trace (at most `attempts`
    times) until the uninstrumented step varies, then let the test check what was found. A race that never fires
    in all attempts fails the test."""
    for _ in range(attempts):
        t = run()
        if t.record.facts.verdict.nondeterministic:
            break
    return t


@pytest.fixture
def run_step(tmp_path):
    """run_step(body, name=..., **settings): write the script, trace it, return a Traced."""

    def run(body: str, name: str = "model_step", **settings) -> Traced:
        return trace(write_script(tmp_path, name, body), tmp_path / "reports", **settings)

    return run


def cli(*args: str, cwd: Path | None = None, env: dict | None = None,
        clear_env: bool = False) -> subprocess.CompletedProcess:
    """Run the `opbisect` command line as a user would, in a fresh process (`clear_env`: with `env` alone)."""
    base = {} if clear_env else dict(os.environ)
    full_env = {**base, **(env or {}), "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run([sys.executable, "-m", "opbisect", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=full_env, timeout=600)
