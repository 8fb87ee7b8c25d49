"""Helpers: write a small step script literally, run `opbisect trace` on it in-process, read what it wrote."""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import signal
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


# A planted source: an unseeded random op, a fresh draw in every run, whatever the machine's load.
NOISE_STEP = """
w = tf.Variable(tf.ones([4]), name="w")


@tf.function
def step(x):
    w.assign_sub(0.1 * tf.random.uniform([4], name="noise") * x)
    return tf.reduce_sum(w)


inputs = (tf.ones([4]),)
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

    @property
    def script(self) -> Path:
        return Path(self.record.meta.script_path)

    def row(self, op_name: str) -> dict:
        return self.csv[self.csv["op_name"] == op_name].iloc[0].to_dict()


def pytest_collection_modifyitems(items):
    from tiers import mark

    mark(items)


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
    # The planted step-level tests ask about runs inside one process; the fresh-process check has tests of its own
    # (tests/test_fresh.py), which ask for it.
    settings.setdefault("fresh", False)
    code = run_trace(TraceSettings(script=path, out=out, progress=False, **settings), echo=lines.append)
    folder = out / path.stem
    traced = Traced(code=code, csv=pd.read_csv(folder / "sources.csv"), lines=lines, record=store.load(folder),
                    csv_path=folder / "sources.csv")
    check_reproducers(folder, traced.record)
    check_views(folder, traced.record, code)
    return traced


COUNTED = ("kind", "first_step", "seen_across", "runs", "runs_differing", "distinct_values", "downstream_differing")


def check_views(folder: Path, record, code: int) -> None:
    """Every view of a record says what the record says, and nothing contradicts another line (issue 41): one verdict
    and exit code; the same sources in the same order with the same counts in the record, sources.csv, report.json,
    the text and the page; an op that never differed is no source; a deterministic verdict names no source that
    reaches the step's result. Every trace a test makes is checked."""
    import html as html_lib
    import json
    import re

    from opbisect.report import answer

    summary = json.loads((folder / "report.json").read_text())
    text = (folder / "summary.txt").read_text().splitlines()
    frame = pd.read_csv(folder / "sources.csv")
    verdict = record.facts.verdict
    assert code == verdict.exit_code == summary["verdict"]["exit_code"]
    assert text[0].endswith(f"(exit {code})") and ("NONDETERMINISTIC" in text[0]) == verdict.nondeterministic
    assert [x for x in text if x.startswith("verdict: ")][-1].startswith(
        f"verdict: {'nondeterministic' if verdict.nondeterministic else 'deterministic'}, exit {code}")
    ops = [s.op_name for s in record.sources]
    assert list(frame["op_name"]) == ops == [s["op_name"] for s in summary["sources"]]
    for s, (_, row), js in zip(record.sources, frame.iterrows(), summary["sources"]):
        assert all(row[k] == getattr(s, k) == js[k] for k in COUNTED), (s.op_name, row.to_dict(), js)
        assert s.distinct_values > 1 or s.kind in ("order", "init", "input"), f"{s.op_name} never differed"
        assert not re.search(rf"{re.escape(s.op_name)} .*max \|diff\| 0[,;]", "\n".join(text))
    if not verdict.nondeterministic:
        assert all(s.observer_effect or not s.affects_result for s in record.sources)
    found = answer.groups(record)
    if any(not g.first.observer_effect for g in found):
        assert f"{len(ops)} source(s) in {len(found)} finding(s)" in "\n".join(text)
    page = folder / "report.html"
    if page.exists():
        dom = page.read_text()
        assert f'data-exit-code="{code}"' in dom
        rows = re.findall(r'<tr data-op="([^"]*)" data-rank="\d+" data-kind="[^"]*" data-count="(\d+)"', dom)
        assert [html_lib.unescape(op) for op, _ in rows] == [g.first.op_name for g in found]
        assert sum(int(n) for _, n in rows) == len(ops)
        if ops:
            assert f"{len(ops)} source(s) in {len(found)} finding(s)" in dom


def check_answer(folder: Path, name: str) -> None:
    """The first lines of a report's summary (the verdict, what differs, what to do, the next command) against
    tests/gold/answers/NAME.txt, paths relative to the repository. OPBISECT_UPDATE_GOLD=1 writes them anew: read
    the diff before committing it."""
    lines = (folder / "summary.txt").read_text().splitlines()
    head = [lines[0], *itertools.takewhile(lambda line: line.startswith("  "), lines[1:])]
    said = "\n".join(head).replace(str(ROOT) + "/", "") + "\n"
    gold = ROOT / "tests" / "gold" / "answers" / f"{name}.txt"
    if os.environ.get("OPBISECT_UPDATE_GOLD"):
        gold.parent.mkdir(exist_ok=True)
        gold.write_text(said)
    assert said == gold.read_text(), "the answer changed: look at it, then OPBISECT_UPDATE_GOLD=1 pytest ..."


def check_reproducers(folder: Path, record) -> None:
    """Every reproducer a trace writes runs in a fresh process and reproduces what the replay saw: exit 1 where
    the op varied alone (a race that needs its context may not: those are not checked). A CPU race fires less on a
    loaded machine, so a reproducer gets up to 3 fresh processes of its 20 runs."""
    for s in record.sources:
        if s.reproducer and s.replay_distinct and s.replay_distinct > 1:
            for _ in range(3):
                done = subprocess.run([sys.executable, str(folder / s.reproducer)], capture_output=True, text=True,
                                      env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}, timeout=600)
                if done.returncode == 1:
                    break
            assert done.returncode == 1, f"{s.reproducer}: {done.stdout}{done.stderr[-2000:]}"


def until_it_fires(run, attempts: int = 5, also=lambda t: True) -> Traced:
    """A real race may not fire in one sample on a loaded machine: repeat the whole trace (at most `attempts`
    times) until it fired both in the uninstrumented runs and in the instrumented ones (a source was named), and
    `also(t)` holds, then let the test check what was found. A race that never fires in all attempts fails the
    test."""
    for _ in range(attempts):
        t = run()
        if t.record.facts.verdict.nondeterministic and t.record.sources and also(t):
            break
    return t


@pytest.fixture(autouse=True)
def no_global_seed_left_behind():
    """A test that seeds TensorFlow in this process (keras.utils.set_random_seed) would seed every random op of the
    scripts traced after it, which a fresh process would not: put the global seed back after each test."""
    yield
    from opbisect import tfcompat

    tfcompat.restore_global_seed(None)


@pytest.fixture(scope="session")
def noise_traced(tmp_path_factory) -> Traced:
    """NOISE_STEP traced once for the whole session (in this process: 3 runs, no replay, no fresh-process check):
    exit 1, its one source the unseeded random op. Tests read it; a test that changes its report folder copies it
    first (`copied_report`)."""
    tmp = tmp_path_factory.mktemp("noise")
    traced = trace(write_script(tmp, "noise", NOISE_STEP), tmp / "C", runs=3, replay=False)
    assert traced.code == 1
    return traced


def copied_report(traced: Traced, into: Path) -> Path:
    """A copy of `traced`'s report folder at `into/<script>`, for a test that changes it."""
    return Path(shutil.copytree(traced.csv_path.parent, into / traced.csv_path.parent.name))


@pytest.fixture
def run_step(tmp_path):
    """run_step(body, name=..., **settings): write the script, trace it, return a Traced."""

    def run(body: str, name: str = "model_step", **settings) -> Traced:
        return trace(write_script(tmp_path, name, body), tmp_path / "reports", **settings)

    return run


def child_env(env: dict | None = None, *first: Path) -> dict:
    """A child process's environment: `env` (this process's by default) with `first` and the project first on
    PYTHONPATH, then whatever path it held (the GPU machine's TensorFlow and Keras are on PYTHONPATH)."""
    env = dict(os.environ if env is None else env)
    path = os.pathsep.join(p for p in (*map(str, first), str(ROOT), env.get("PYTHONPATH", "")) if p)
    return {**env, "PYTHONPATH": path}


def _sigint_at_its_default() -> None:
    """A child's SIGINT as a terminal starts a command: a test run as a background job (`cmd &`) inherits it
    ignored, and opbisect keeps an ignored SIGINT ignored, as it must."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cli(*args: str, cwd: Path | None = None, env: dict | None = None,
        clear_env: bool = False) -> subprocess.CompletedProcess:
    """Run the `opbisect` command line as a user would, in a fresh process started as a terminal starts it
    (`clear_env`: with `env` alone)."""
    base = {} if clear_env else dict(os.environ)
    full_env = {**child_env({**base, **(env or {})}), "TF_CPP_MIN_LOG_LEVEL": "2"}
    return subprocess.run([sys.executable, "-m", "opbisect", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=full_env, timeout=600, preexec_fn=_sigint_at_its_default)
