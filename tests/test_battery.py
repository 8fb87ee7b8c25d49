"""Defects a hostile-input battery found (issue 32): no report lost or misstated, no verdict on a user error, no
orphan and no leftover after a signal. Each test fails on the code before its fix."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from opbisect.cli import main
from opbisect.execute import children
from opbisect.record import store

from conftest import NOISE_STEP, child_env, copied_report, write_script

DETERMINISTIC = """
w = tf.Variable(tf.ones([4]), name="w")


@tf.function
def step(x):
    w.assign_sub(0.1 * x)
    return tf.reduce_sum(w)


inputs = (tf.ones([4]),)
"""


def _trace(script: Path, out: Path, *flags: str) -> int:
    replay = [] if "--replay" in flags else ["--no-replay"]
    flags = [f for f in flags if f != "--replay"]
    return main(["trace", str(script), "--runs", "3", *replay, "--no-progress", "--out", str(out), *flags])


@pytest.fixture
def noise_report(noise_traced, tmp_path) -> Path:
    """A report folder of a step with an unseeded random op (exit 1): the session's trace, copied for this test."""
    return copied_report(noise_traced, tmp_path / "C")


def test_report_of_a_renamed_report_folder_remakes_it_there_and_leaves_the_newer_report_alone(noise_report):
    monday = noise_report.parent / "monday"
    shutil.copytree(noise_report, monday)  # as `mv C/noise C/monday` then a new trace into C/noise
    newer = (noise_report / "record.json").read_bytes()
    assert main(["report", str(monday), "--html"]) == 1
    assert (noise_report / "record.json").read_bytes() == newer and not (noise_report / "report.html").exists()
    assert (monday / "report.html").is_file()
    assert main(["report", str(monday), "--out", str(noise_report.parent)]) == 128  # would replace C/noise
    assert (noise_report / "record.json").read_bytes() == newer


def test_verify_with_another_scripts_csv_is_a_usage_error(noise_report, tmp_path):
    det = write_script(tmp_path, "det", DETERMINISTIC)
    code = main(["verify", str(det), "--patch", str(noise_report / "sources.csv"), "--runs", "2", "--timing-runs", "0",
                 "--no-switches", "--cpu-reference", "off", "--out", str(tmp_path / "V")])
    assert code == 128
    assert not (tmp_path / "V" / "det-verify").exists()


def test_a_signal_while_the_report_moves_into_place_leaves_the_new_report_and_no_old_one(noise_report, monkeypatch):
    folder = store.ReportFolder(noise_report.parent, "noise", store.script_of(noise_report)).prepare()
    folder.write("report.json", json.dumps({"script_path": store.script_of(noise_report)}))
    folder.write("marker", "new")
    rename = os.rename

    def interrupted_rename(src, dst):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C in the middle of the move (held until it is done)
        rename(src, dst)

    monkeypatch.setattr(os, "rename", interrupted_rename)
    assert folder.commit() == noise_report and folder.interrupted
    assert (noise_report / "marker").read_text() == "new"
    assert [p.name for p in noise_report.parent.iterdir() if p.name.startswith(".")] == []


def test_a_script_that_is_a_symlink_loop_cannot_be_tested(tmp_path):
    loop = tmp_path / "loop.py"
    loop.symlink_to(loop)
    assert _trace(loop, tmp_path / "r") == 125
    assert main(["verify", str(loop), "--patch", "BiasAddGrad", "--out", str(tmp_path / "r")]) == 125


@pytest.mark.parametrize("damage", ["empty", "dangling edge", "op without outputs"])
def test_a_record_whose_graph_is_damaged_is_refused_and_nothing_is_written(noise_report, tmp_path, damage):
    data = json.loads((noise_report / "record.json").read_text())
    if damage == "empty":
        data["graph"]["nodes"], data["graph"]["edges"] = [], []
    elif damage == "dangling edge":
        data["graph"]["edges"].append({**data["graph"]["edges"][0], "target": "no/such/op"})
    else:
        del data["graph"]["nodes"][0]["outputs"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    assert main(["report", str(bad), "--html", "--out", str(tmp_path / "out")]) == 128
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_a_stored_exit_code_that_contradicts_the_verdict_is_refused(noise_report, tmp_path):
    data = json.loads((noise_report / "record.json").read_text())
    data["facts"]["verdict"]["exit_code"] = 7
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    assert main(["report", str(bad)]) == 128


def test_control_sequences_in_a_record_do_not_reach_the_terminal(noise_report, tmp_path, capsys):
    data = json.loads((noise_report / "record.json").read_text())
    data["findings"].append({"level": "note", "message": "\x1b]0;pwned\x07\x1b[31mred\x1b[0m and \x9b2J"})
    planted = tmp_path / "planted.json"
    planted.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["report", str(planted)]) == 1
    out = capsys.readouterr().out
    assert "red and 2J" in out and not any(c in out for c in "\x1b\x07\x9b")


def test_magnitude_runs_of_1_is_a_usage_error(tmp_path):
    script = write_script(tmp_path, "det", DETERMINISTIC)
    assert _trace(script, tmp_path / "r", "--magnitude-runs", "1") == 128


def test_processes_name_only_reproducers_the_report_holds(tmp_path):
    script = write_script(tmp_path, "noise", NOISE_STEP)
    assert _trace(script, tmp_path / "r", "--processes", "2", "--replay") == 1
    folder = tmp_path / "r" / "noise"
    named = [p for p in pd.read_csv(folder / "sources.csv", keep_default_na=False)["reproducer"] if p]
    assert named and all((folder / p).is_file() for p in named)


def test_a_script_that_changes_directory_while_loading_reports_where_opbisect_was_started(tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = write_script(tmp_path, "wanders", f"import os\nos.chdir({str(elsewhere)!r})\n" + DETERMINISTIC)
    monkeypatch.chdir(tmp_path)
    assert _trace(script, Path("reports")) == 0
    assert (tmp_path / "reports" / "wanders" / "record.json").is_file()
    assert not (elsewhere / "reports").exists()
    assert [p.name for p in (tmp_path / "reports").iterdir()] == ["wanders"]


def test_what_a_killed_run_left_is_removed_by_the_next_run(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid names a process that is gone
    out = tmp_path / "r"
    for name in (f".det.{dead.pid}.abc.partial", f".det.old-{dead.pid}"):
        (out / name).mkdir(parents=True)
    mine = out / f".det.{os.getpid()}.live.partial"  # a living process's staging folder stays
    mine.mkdir()
    script = write_script(tmp_path, "det", DETERMINISTIC)
    assert _trace(script, out) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(["det", mine.name])


@pytest.mark.parametrize("waits", ["output kept", "stderr told as it comes"])
def test_a_second_ctrl_c_does_not_leave_the_child_running(tmp_path, monkeypatch, waits):
    # The child takes its time to stop on SIGTERM (as a step inside a long kernel would); a second Ctrl-C comes
    # while the parent waits for it. The parent must still wait for it to end. Each signal waits for the child to
    # be where it matters (files it writes), not for a time, and goes to the main thread itself: a signal sent to
    # the process may be taken by another thread (TensorFlow's), which would leave the main thread's wait unbroken.
    # The child ends only after the second Ctrl-C was sent, so a parent that gave up on it would see it running.
    ready, stopping, second = tmp_path / "ready", tmp_path / "stopping", tmp_path / "second"
    child = ("import pathlib, signal, sys, time\n"
             "def stop(*a):\n"
             f"    pathlib.Path({str(stopping)!r}).touch()\n"
             f"    while not pathlib.Path({str(second)!r}).exists(): time.sleep(0.02)\n"
             "    time.sleep(0.3); sys.exit(7)\n"
             f"signal.signal(signal.SIGTERM, stop)\npathlib.Path({str(ready)!r}).touch()\ntime.sleep(120)\n")
    main_thread = threading.main_thread().ident

    def ctrl_c_when(path: Path) -> None:
        deadline = time.monotonic() + 60
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        signal.pthread_kill(main_thread, signal.SIGINT)

    def ctrl_c_twice():
        ctrl_c_when(ready)
        ctrl_c_when(stopping)  # while the parent waits for the child to stop
        second.touch()  # only now may the child end

    spawned = []
    real_popen = subprocess.Popen

    def popen(*args, **kwargs):
        spawned.append(real_popen(*args, **kwargs))
        return spawned[-1]

    # Python's own Ctrl-C handler, as an interactive shell starts Python with it: a test run started as a background
    # job of a non-interactive shell (`cmd &`, nohup) inherits SIGINT ignored, and Python then installs none, so no
    # Ctrl-C would reach the wait at all (the child slept its 120 s out: seen once in a loaded run).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    monkeypatch.setattr(children.subprocess, "Popen", popen)
    threading.Thread(target=ctrl_c_twice, daemon=True).start()
    try:
        cmd = [sys.executable, "-c", child]
        if waits == "output kept":
            done = children.run(cmd, dict(os.environ))
        else:  # fix's verify: its child's progress said as it comes
            done = children.run_telling(cmd, dict(os.environ), lambda line: None)
    except KeyboardInterrupt:
        done = None
    finally:
        signal.signal(signal.SIGINT, previous)
    assert done is None, f"the child ended by itself (exit {done.returncode}): {done.stderr[-2000:]}"
    assert stopping.exists()  # the child was asked to stop (SIGTERM) ...
    # ... and its handler ran to its end: the parent waited for it through the second Ctrl-C (exit 7, not killed)
    assert [p.returncode for p in spawned] == [7]


def test_a_tensorflow_older_than_supported_cannot_be_tested(tmp_path):
    fake = tmp_path / "fake" / "tensorflow"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("__version__ = '2.15.1'\n")
    script = write_script(tmp_path, "det", DETERMINISTIC)
    done = subprocess.run([sys.executable, "-m", "opbisect", "trace", str(script), "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, env=child_env(None, fake.parent))
    assert done.returncode == 125 and "2.15.1" in done.stderr.splitlines()[-1]
