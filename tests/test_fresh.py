"""The fresh-process check: two fresh runs of the script, the user's own test. Each shipped case (examples/fresh/) is
an unmodified script that prints `final weights <digest>`: its two fresh runs are the oracle. With no flags, `trace`
must give the oracle's verdict, the kind of what differs and the cause pinned by experiment; the seeded twin (one
flag of the script) must come out clean; `fix` must exit 0 only once two fresh runs with its recommendation agree,
and the command it recommends, run twice, must print one digest."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from opbisect.analysis import fresh
from opbisect.record.model import Cause, Made, Probe

from conftest import EXAMPLES, ROOT, check_answer, child_env

CASES = {  # script: (its seeded twin's flag, the kind that differs, the cause the experiment must pin)
    "keras3_tutorial_seeds": ("--seeded", "init", ["python"]),
    "tf_keras_tutorial_seeds": ("--seeded", "init", ["python"]),
    "custom_loop_unseeded": ("--seeded", "init", ["python"]),
    "set_vocabulary": ("--sorted", "input", ["hash"]),
    "unseeded_shuffle": ("--seeded", "input", ["tensorflow"]),
    "parallel_map": ("--deterministic", "input", ["tfdata"]),
}
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONHASHSEED", "TF_USE_LEGACY_KERAS")}  # as a user's


def digest(script, *args, env=None) -> str:
    done = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=600,
                          env=child_env({**ENV, **(env or {})}))
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()[-1]


def opbisect(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opbisect", *map(str, args)], capture_output=True, text=True,
                          env=child_env({**ENV, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}), timeout=1800,
                          cwd=ROOT)


@pytest.mark.parametrize("name", list(CASES))
def test_trace_gives_the_fresh_runs_verdict_the_kind_and_the_cause(tmp_path, name):
    script, (_, kind, cause) = EXAMPLES / "fresh" / f"{name}.py", CASES[name]
    assert digest(script) != digest(script)  # the oracle: two fresh runs differ
    done = opbisect("trace", script, "--runs", "3", "--no-progress", "--no-replay", "--out", tmp_path)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads((tmp_path / name / "record.json").read_text())
    check_answer(tmp_path / name, f"fresh_{name}")
    rows = [s for s in record["sources"] if s["seen_across"] == "processes"]
    assert rows and {s["kind"] for s in rows} == {kind}
    assert record["fresh"]["cause"]["sources"] == cause
    if kind == "init":  # each differing variable with the line of the script that made it
        assert all(s["source_location"].startswith(f"{name}.py:") for s in rows)
    if cause == ["hash"]:  # the `set` the vocabulary is built from
        assert record["fresh"]["set_sites"] == [f"{name}.py:24"]


@pytest.mark.parametrize("name", list(CASES))
def test_the_seeded_twin_is_clean_as_its_fresh_runs_are(tmp_path, name):
    script, twin = EXAMPLES / "fresh" / f"{name}.py", CASES[name][0]
    assert digest(script, twin) == digest(script, twin)  # the oracle: two fresh runs agree
    done = opbisect("trace", script, "--runs", "3", "--no-progress", "--no-replay", "--out", tmp_path, "--", twin)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads((tmp_path / name / "record.json").read_text())
    assert record["fresh"]["error"] == "" and not record["fresh"]["init"] and not record["fresh"]["batches"]
    check_answer(tmp_path / name, f"fresh_{name}_{twin.lstrip('-')}")


@pytest.mark.parametrize("name", list(CASES))
def test_fix_ends_on_the_users_test_and_its_command_prints_one_digest(tmp_path, name):
    script = EXAMPLES / "fresh" / f"{name}.py"
    done = opbisect("fix", script, "--runs", "3", "--max-runs", "6", "--no-progress", "--out", tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    fix = json.loads((tmp_path / f"{name}-fix" / "fix.json").read_text())
    assert fix["rounds"][0]["cause"] == CASES[name][2] and fix["test"]["agreed"]
    rounds = [json.loads((tmp_path / f"{name}-fix" / r["report"] / "record.json").read_text()) for r in fix["rounds"]]
    assert all(r["fresh"]["script"] is None for r in rounds)  # the fix ends on its own test: its rounds run none
    words = shlex.split(fix["recommendation"] and done.stdout.splitlines()[1].split("run it so: ", 1)[1])
    env = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-"))
    argv = [w for w in words if w not in {f"{k}={v}" for k, v in env.items()}]
    assert argv[:2] == ["opbisect", "run"]
    printed = []
    for _ in range(2):
        ran = opbisect(*argv[1:], env=env)
        assert ran.returncode == 0, ran.stderr[-2000:]
        printed.append(ran.stdout.split()[-1])  # the script's own `final weights` digest
    assert printed[0] == printed[1]


def test_runs_that_part_in_a_later_training_call_make_the_trace_say_so_and_where_to_look(tmp_path):
    """The first fit starts alike and gives one result; a head put on after it, unseeded, does not: the user's two
    runs differ, so trace must not say 0. Its next command traces that call and names the cause."""
    script = EXAMPLES / "fresh" / "new_head.py"
    assert digest(script) != digest(script)  # the oracle: two fresh runs differ
    done = opbisect("trace", script, "--runs", "3", "--no-progress", "--no-replay", "--out", tmp_path / "first")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads((tmp_path / "first" / "new_head" / "record.json").read_text())
    fresh_check, runs = record["fresh"], record["fresh"]["script"]
    assert not fresh_check["init"] and not fresh_check["batches"]  # the analysed call starts alike
    assert (runs["first_apart"], runs["apart_call"], runs["calls"], runs["ran"]) == (9, "fit:2", ["fit:1", "fit:2"],
                                                                                      [16, 16])  # to the end
    check_answer(tmp_path / "first" / "new_head", "fresh_new_head")
    following = shlex.split(done.stdout.split("next: ", 1)[1].splitlines()[0])
    assert following[1:] == ["trace", str(script), "--at", "fit:2"]
    again = opbisect(*following[1:], "--runs", "3", "--no-progress", "--no-replay", "--out", tmp_path / "second")
    assert again.returncode == 1, again.stdout[-3000:] + again.stderr[-3000:]
    second = json.loads((tmp_path / "second" / "new_head" / "record.json").read_text())
    assert second["fresh"]["init"] and second["fresh"]["cause"]["sources"] == ["python"]  # the head's initializer


def test_runs_that_agree_through_both_calls_leave_exit_0_and_no_script_check_runs_none(tmp_path):
    script = EXAMPLES / "fresh" / "new_head.py"
    assert digest(script, "--seeded") == digest(script, "--seeded")
    done = opbisect("trace", script, "--runs", "3", "--no-progress", "--no-replay", "--out", tmp_path, "--",
                    "--seeded")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = json.loads((tmp_path / "new_head" / "record.json").read_text())["fresh"]["script"]
    assert runs["agreed"] and runs["calls"] == ["fit:1", "fit:2"] and runs["ran"] == [16, 16]  # 8 + 8: to the end
    unchecked = opbisect("trace", script, "--runs", "3", "--no-progress", "--no-replay", "--no-script-check",
                         "--out", tmp_path / "unchecked")
    assert unchecked.returncode == 0  # as before the script's runs: the call analysed alone
    assert json.loads((tmp_path / "unchecked" / "new_head" / "record.json").read_text())["fresh"]["script"] is None


def test_a_variation_that_fires_once_in_20_steps_parts_the_users_test_so_trace_does_not_say_0(tmp_path):
    """Every run of the step from one state agrees, and the runs start alike; a nudge from the OS's entropy after about
    1 step in 20 parts two runs of the script. 10 steps each missed it 2 times in 5 (0.95 ** 18); the default 100
    misses it about once in 30,000, so trace's exit 1 is the user's answer."""
    script = EXAMPLES / "fresh" / "rare_variation.py"
    assert digest(script) != digest(script)  # the oracle: two fresh runs differ
    done = opbisect("trace", script, "--runs", "3", "--no-progress", "--no-replay", "--out", tmp_path)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads((tmp_path / "rare_variation" / "record.json").read_text())
    assert record["facts"]["verdict"]["rate_bound"] is None and not record["sources"]
    runs = record["fresh"]["script"]
    assert (runs["steps"], runs["agreed"], runs["calls"]) == (100, False, ["step:train_step"])
    assert 1 <= runs["first_apart"] <= 100 and "sequential/dense_1/bias" in runs["apart"]


@pytest.mark.parametrize("cores, script, early", [(16, "zero_edit/keras3_fit.py", True),
                                                   (16, "embedding_sgd.py", False),  # the target contract
                                                   (2, "zero_edit/keras3_fit.py", False)])
def test_the_scripts_runs_start_beside_the_experiment_only_on_cores_to_spare_and_only_for_a_script_that_trains(
        monkeypatch, cores, script, early):
    from opbisect.execute import children, usertest
    from opbisect.execute import fresh as running
    from opbisect.settings import TraceSettings

    class Ended:  # the probe's child, not run here
        def poll(self):
            return 0

    started = []
    monkeypatch.setattr(running.os, "cpu_count", lambda: cores)
    monkeypatch.setattr(children, "start", lambda cmd, env, **kw: Ended())
    monkeypatch.setattr(usertest.UserTestRuns, "started", classmethod(lambda cls, *a, **k: started.append(a) or a))
    with running.FreshRun(TraceSettings(script=EXAMPLES / script)) as checking:
        assert (checking.early is not None) == early == bool(started)
        checking.early = None  # nothing to end: no process was started


@pytest.mark.parametrize("script, check_steps, flag, steps", [("zero_edit/keras3_fit.py", 0, "--steps", "0"),
                                                            ("embedding_sgd.py", 0, "--steps", "100"),
                                                            ("embedding_sgd.py", 7, "--steps", "7")])
def test_the_users_test_of_the_target_contract_takes_the_default_steps_for_0_as_it_has_no_end(
        monkeypatch, tmp_path, script, check_steps, flag, steps):
    """`--check-steps 0` runs a script that trains to its end; the target contract trains nothing by itself, so its
    probes take the default (they ran 1 step, and the answer called that the script's end)."""
    from opbisect.execute import children, usertest
    from opbisect.settings import FixSettings

    commands = []
    monkeypatch.setattr(children, "start", lambda cmd, env, **kw: commands.append(cmd))
    intercepted = script.startswith("zero_edit")
    runs = usertest.UserTestRuns.started(FixSettings(script=EXAMPLES / script, check_steps=check_steps), tmp_path,
                                         intercepted)
    assert runs.steps == int(steps) and len(commands) == 2
    assert all(cmd[cmd.index(flag) + 1] == steps for cmd in commands)


# -- the decisions, on planted probes ---------------------------------------------------------------------------

def probe(initial: dict, batches: list[str], after: list[dict] | None = None) -> Probe:
    return Probe(initial=initial, batches=batches, after=after or [], outputs=["o"] * len(after or []))


def test_state_batches_and_results_apart_are_told_apart():
    a = probe({"w": "1", "b": "2"}, ["10", "11"], [{"w": "3"}, {"w": "4"}])
    assert fresh.check(a, probe({"w": "9", "b": "2"}, ["10", "11"], [{"w": "3"}]), None, "unset").init == ["w"]
    assert fresh.check(a, probe({"w": "1", "b": "2"}, ["10", "12"], [{"w": "3"}]), None, "unset").batches == [2]
    later = fresh.check(a, probe({"w": "1", "b": "2"}, ["10", "11"], [{"w": "3"}, {"w": "5"}]), None, "unset")
    assert (later.init, later.batches, later.first_differing_step) == ([], [], 2)
    # a step that varies inside this process from step 2 on: its cross-process difference there is no news
    varying = probe({"w": "1", "b": "2"}, ["10", "11"], [{"w": "3"}, {"w": "5"}])
    assert fresh.check(a, varying, 2, "unset").apart is False


def test_a_process_that_numbered_keras_names_on_is_compared_variable_for_variable():
    # this process made a `dense` before the script (a notebook, a test): the script's layer is dense_1 here
    here = probe({"dense_1/kernel": "1", "sgd/iteration": "0"}, ["10"], [{"dense_1/kernel": "3", "sgd/iteration": "1"}])
    alike = probe({"dense/kernel": "1", "sgd/iteration": "0"}, ["10"], [{"dense/kernel": "3", "sgd/iteration": "1"}])
    assert not fresh.check(here, alike, None, "unset").apart  # not 'apart after step 1' for a name
    other = probe({"dense/kernel": "9", "sgd/iteration": "0"}, ["10"], [{"dense/kernel": "3", "sgd/iteration": "1"}])
    assert fresh.check(here, other, None, "unset").init == ["dense_1/kernel"]  # not hidden by the name
    # two different variables are never paired by their order
    swapped = probe({"sgd/iteration": "0", "dense/kernel": "1"}, ["10"], [{"sgd/iteration": "1", "dense/kernel": "3"}])
    assert fresh.paired(here.initial, swapped.initial) == [("sgd/iteration", "sgd/iteration")]
    assert fresh.check(here, swapped, None, "unset").first_differing_step == 1


def test_the_experiment_tries_the_likeliest_source_first_and_stops_at_the_first_that_agrees():
    assert fresh.candidates(True)[0] == ["python"] and fresh.candidates(False)[0] == ["tensorflow"]
    singles = [c for c in fresh.candidates(True) if len(c) == 1]
    assert sorted(c[0] for c in singles) == ["hash", "numpy", "python", "tensorflow", "tfdata"]
    assert fresh.cause_of([["python"], ["numpy"]], [False, True]).sources == ["numpy"]
    nothing = fresh.cause_of([["python"], ["python", "numpy"]], [False, False])
    assert not nothing.found and "did not make two fresh processes agree" in fresh.remedy(nothing, {}, [])


def test_the_remedy_names_the_line_where_it_goes():
    said = fresh.remedy(Cause(["python"], [["python"]], [True]), {"dense/kernel": Made("train.py:31", "layer d")},
                        [])
    assert "keras.utils.set_random_seed(7)" in said and "train.py:31" in said
    hashed = fresh.remedy(Cause(["hash"], [["hash"]], [True]), {}, ["train.py:23"])
    assert "sorted(" in hashed and "train.py:23" in hashed and "PYTHONHASHSEED=7" in hashed


def test_sets_iterated_in_hash_order_are_found_in_the_source(tmp_path):
    script = tmp_path / "vocab.py"
    script.write_text("words = text.split()\nvocab = {w: i for i, w in enumerate(set(words))}\n"
                      "ids = list({'a', 'b'})\nfine = sorted(set(words))\nfor w in set(words):\n    pass\n")
    assert fresh.set_sites(script) == ["vocab.py:2", "vocab.py:3", "vocab.py:5"]
