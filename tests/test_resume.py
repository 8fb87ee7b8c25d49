"""A stopped `opbisect fix` keeps what it finished, beside its report folder (never in it), and `fix --resume` goes on
from there: the kept rounds are not traced again, the patch comes out the same, and the report is whole."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree

import pandas as pd
import pytest
from test_rounds import HIDDEN_BEHIND, XHTML

from opbisect import cli
from opbisect.cli import main
from opbisect.execute import children, workers
from opbisect.fix import resume
from opbisect.fix.driver import FixDriver
from opbisect.fix.resume import Kept
from opbisect.record import store
from opbisect.record.fixing import Round
from opbisect.settings import FixSettings, TraceSettings

from conftest import NOISE_STEP, child_env, write_script


def _fix(script, out, *flags) -> int:
    return main(["fix", str(script), "--runs", "3", "--verify-runs", "3", "--timing-runs", "5", "--out", str(out),
                 *flags])


def _counting(monkeypatch, stop_at: dict):
    """The children started (every child goes through children.start), counted by command; Ctrl-C comes at the
    start given (`{"trace": 2}`: as the second trace starts). The user's test runs the target contract's step as a
    probe of `trace`: counted as "test"."""
    calls, real = {"trace": 0, "verify": 0, "test": 0}, children.start

    def start(cmd, *args, **kwargs):
        argv = cmd[cmd.index("opbisect") + 1:]
        probe = argv[0] == "trace" and TraceSettings.from_namespace(cli.parse(argv)).probe != Path()
        command = "test" if probe else argv[0]
        calls[command] += 1
        if stop_at.get(command) == calls[command]:
            raise KeyboardInterrupt
        return real(cmd, *args, **kwargs)

    monkeypatch.setattr(children, "start", start)
    return calls


def test_a_fix_stopped_twice_goes_on_each_time_from_what_it_finished(tmp_path, monkeypatch, capsys):
    script, out = write_script(tmp_path, "hidden", HIDDEN_BEHIND), tmp_path / "r"
    kept = out / ".hidden-fix.resume"
    calls = _counting(monkeypatch, {"trace": 2})  # Ctrl-C as round 2 starts
    assert _fix(script, out) == 130
    assert not (out / "hidden-fix").exists()  # no report, as a stopped command leaves none
    state = json.loads((kept / "state.json").read_text())
    assert [(r["number"], r["new"]) for r in state["rounds"]] == [(1, ["first"])]
    assert f"kept in {kept}" in capsys.readouterr().err

    calls = _counting(monkeypatch, {"test": 1})  # Ctrl-C as the user's test starts its first run
    assert _fix(script, out, "--resume") == 130
    assert (calls["trace"], calls["verify"]) == (2, 1)  # rounds 2 and 3, not round 1 again
    state = json.loads((kept / "state.json").read_text())
    assert [(r["number"], r["kept"]) for r in state["rounds"]] == [(1, True), (2, False), (3, False)]
    assert state["verify_key"] is not None

    calls = _counting(monkeypatch, {})
    assert _fix(script, out, "--resume") == 0
    assert calls == {"trace": 0, "verify": 0, "test": 2}  # only the user's test ran again: it is the verdict
    folder = out / "hidden-fix"
    fix = json.loads((folder / "fix.json").read_text())
    assert [(r["exit_code"], r["new"]) for r in fix["rounds"]] == [(1, ["first"]), (1, ["second"]), (0, [])]
    assert [r["seconds"] for r in fix["rounds"]] == [r["seconds"] for r in state["rounds"]]
    patch = pd.read_csv(folder / "patch.csv")
    assert list(zip(patch["round"], patch["op_name"])) == [(1, "first"), (2, "second")]
    assert fix["test"]["agreed"] and fix["recommendation"]["variant"] == "patched"
    verified = json.loads((folder / fix["verify"] / "verification.json").read_text())
    assert verified["patch"] == str(folder / "patch.csv")  # kept reports name the folder the fix ended in
    assert not [f for f in folder.rglob("*") if f.is_file() and b".partial" in f.read_bytes()]
    assert not kept.exists()  # ended with a report: nothing is left to resume
    assert [r["kept"] for r in fix["rounds"]] == [True, True, True]  # all three finished before the last stop
    page = ElementTree.parse(folder / "report.html").getroot()
    assert [r.get("data-kept") for r in page.findall(".//x:tr[@data-round]", XHTML)] == ["true"] * 3


def _stopped(settings: FixSettings, verified: bool) -> str:
    """A fix of `settings` stopped after its first round (and verify, where `verified`): what its kept folder
    says."""
    folder = store.ReportFolder(settings.out, f"{settings.script.stem}-fix", str(settings.script)).prepare()
    driver = FixDriver(settings, folder.staging, folder.final)
    for name in ["round1/s/report.json"] + (["verify/s-verify/verification.json"] if verified else []):
        (folder.staging / name).parent.mkdir(parents=True)
        (folder.staging / name).write_text(json.dumps({"out": str(folder.staging / name)}))
    driver.rounds.append(Round(1, 1, [], [], ["a"], ["a"], 2.5, "round1/s"))
    driver.verified = verified
    return Kept(folder).save(driver)


def _resumed(settings: FixSettings):
    folder = store.ReportFolder(settings.out, f"{settings.script.stem}-fix", str(settings.script)).prepare()
    driver = FixDriver(settings, folder.staging, folder.final)
    return Kept(folder).restore(driver), driver, folder


def _gpus(monkeypatch, folder, model: str):
    """This machine as one with a GPU of `model`: an nvidia-smi first on PATH that lists it."""
    folder.mkdir()
    (folder / "nvidia-smi").write_text(f"#!/bin/sh\necho 'GPU 0: {model} (UUID: GPU-5e7a)'\n")
    (folder / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    # a fresh cache over the same reading, in resume's name alone: the machine's own stays as it was
    monkeypatch.setattr(resume, "machine_gpus", functools.cache(workers.machine_gpus.__wrapped__))


@pytest.mark.parametrize("change, why", [
    ({}, ""),
    ({"runs": 7}, "the options differ"),
    ({"script": "edited"}, "the script changed"),
    ({"env": "XLA_FLAGS"}, "the environment differs (XLA_FLAGS)"),
    ({"verify_runs": 30}, ""),  # the rounds hold; verify's own options differ, so it runs again
    ({"gpus": "NVIDIA H100 80GB HBM3"}, "the GPUs differ"),  # stopped on one machine, resumed on another
])
def test_resume_takes_what_was_kept_only_where_what_it_ran_from_is_the_same(tmp_path, monkeypatch, change, why):
    script = write_script(tmp_path, "s", NOISE_STEP)
    settings = FixSettings(script=script, out=tmp_path / "r")
    _gpus(monkeypatch, tmp_path / "stopped", "NVIDIA H200")
    assert "kept in" in _stopped(settings, verified=True)
    if "gpus" in change:
        _gpus(monkeypatch, tmp_path / "resumed", change.pop("gpus"))
    if change.pop("script", None):
        script.write_text(script.read_text() + "\n# edited\n")
    if change.pop("env", None):
        monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_enable_triton_gemm=false")
    said, driver, folder = _resumed(dataclasses.replace(settings, **change))
    if why:
        assert (driver.kept, driver.kept_verify) == ({}, False) and f"not taken, {why} since" in said
        return
    assert list(driver.kept) == [1] and driver.kept[1].seconds == 2.5
    assert driver.kept_verify == ("verify_runs" not in change)
    copied = json.loads((folder.staging / "round1/s/report.json").read_text())
    assert copied["out"] == str(folder.staging / "round1/s/report.json")  # the paths name the new staged folder


def test_a_kept_key_from_before_the_gpus_were_keyed_holds_on_any_gpus(tmp_path, monkeypatch):
    _gpus(monkeypatch, tmp_path / "bin", "NVIDIA H200")
    settings = FixSettings(script=write_script(tmp_path, "s", NOISE_STEP), out=tmp_path / "r")
    now = resume.key(settings)
    assert now["gpus"] == ["NVIDIA H200"]
    assert resume.changed({k: v for k, v in now.items() if k != "gpus"}, now) == ""


def test_a_fix_without_resume_says_what_is_kept_and_a_stop_before_a_round_keeps_the_earlier_rounds(tmp_path):
    settings = FixSettings(script=write_script(tmp_path, "s", NOISE_STEP), out=tmp_path / "r")
    assert _stopped(settings, verified=False)
    folder = store.ReportFolder(settings.out, "s-fix", str(settings.script)).prepare()
    kept = Kept(folder)
    assert kept.told().startswith("a stopped fix of this script kept 1 round(s)")
    assert kept.save(FixDriver(settings, folder.staging, folder.final)) == ""  # stopped before its first round
    assert [r["number"] for r in kept.state().rounds] == [1]
    said, driver, _ = _resumed(settings)
    assert list(driver.kept) == [1] and not driver.kept_verify and "1 round(s) kept" in said


def test_a_stop_whose_rounds_cannot_be_kept_says_so_and_keeps_nothing(tmp_path):
    settings = FixSettings(script=write_script(tmp_path, "s", NOISE_STEP), out=tmp_path / "r")
    folder = store.ReportFolder(settings.out, "s-fix", str(settings.script)).prepare()
    driver = FixDriver(settings, folder.staging, folder.final)
    driver.rounds.append(Round(1, 1, [], [], ["a"], ["a"], 2.5, "round1/s"))
    settings.script.unlink()  # its key reads the script's bytes
    said = Kept(folder).save(driver)
    assert said.startswith("the fix's finished rounds could not be kept") and Kept(folder).state() is None


def _staged_by(pid: int, out: Path, rounds: int, mtime: float) -> Path:
    """A fix's staged folder as process `pid` left it, with state.json as of `rounds` finished rounds."""
    folder = out / f".s-fix.{pid}.x1.partial"
    (folder / "round1").mkdir(parents=True)
    (folder / "state.json").write_text(json.dumps({"staging": str(folder), "rounds_key": {}, "rounds": [
        dataclasses.asdict(Round(n, 1, [], [], ["a"], ["a"], 1.0, f"round{n}/s")) for n in range(1, rounds + 1)]}))
    os.utime(folder / "state.json", (mtime, mtime))
    return folder


def test_a_killed_fix_s_staged_folder_is_kept_unless_its_process_lives_or_the_kept_one_is_newer(tmp_path):
    settings = FixSettings(script=write_script(tmp_path, "s", NOISE_STEP), out=tmp_path / "r")
    kept = Kept(store.ReportFolder(settings.out, "s-fix", str(settings.script)))
    assert kept.adopt() == ""  # no --out yet
    gone = _pid_of_ended()
    living = _staged_by(os.getpid(), settings.out, 3, time.time())
    _staged_by(gone, settings.out, 2, time.time() - 10)
    assert "killed after 2 finished round(s)" in kept.adopt() and len(kept.state().rounds) == 2
    assert living.exists() and len(list(settings.out.glob(".s-fix.*.partial"))) == 1  # a running fix's is its own
    older = _staged_by(gone, settings.out, 1, time.time() - 100)
    assert kept.adopt() == "" and len(kept.state().rounds) == 2  # the kept rounds are newer
    replaced = settings.out / f".s-fix.resume.old-{gone}"  # a kept folder being replaced when its fix was killed
    replaced.mkdir()
    kept.folder.prepare()
    assert not older.exists() and not replaced.exists()  # then removed as stale


def _pid_of_ended() -> int:
    """A process id no process has now (the highest free one)."""
    pid = int(Path("/proc/sys/kernel/pid_max").read_text()) - 1
    while Path(f"/proc/{pid}").exists():
        pid -= 1
    return pid


def test_a_fix_killed_outright_after_a_round_goes_on_from_it_with_resume(tmp_path, monkeypatch, capsys):
    script, out = write_script(tmp_path, "hidden", HIDDEN_BEHIND), tmp_path / "r"
    monkeypatch.setenv("PYTHONPATH", child_env()["PYTHONPATH"])  # the fix's rounds read it: part of their key
    proc = subprocess.Popen([sys.executable, "-m", "opbisect", "fix", str(script), "--runs", "3", "--out", str(out),
                             "--no-progress"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not _rounds_noted(out):
        time.sleep(0.1)
    proc.kill()  # SIGKILL: nothing of the fix's own runs
    assert proc.wait() == -signal.SIGKILL and _rounds_noted(out) >= 1, proc.stderr.read()[-2000:]
    noted = _rounds_noted(out)
    calls = _counting(monkeypatch, {})
    assert _fix(script, out, "--resume") == 0
    assert calls["trace"] == 3 - noted  # the rounds it noted are not traced again
    assert f"killed after {noted} finished round(s)" in capsys.readouterr().out
    fix = json.loads((out / "hidden-fix" / "fix.json").read_text())
    assert [r["new"] for r in fix["rounds"]] == [["first"], ["second"], []]
    assert [r["kept"] for r in fix["rounds"]] == [n <= noted for n in (1, 2, 3)]
    assert not list(out.glob(".*")) and not (out / "hidden-fix" / "state.json").exists()


def _rounds_noted(out: Path) -> int:
    """How many rounds a running fix's staged folder notes as finished (0: none yet)."""
    for state in out.glob(".hidden-fix.*.partial/state.json"):
        try:
            return len(json.loads(state.read_text())["rounds"])
        except (OSError, ValueError):
            continue
    return 0
