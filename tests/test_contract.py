"""The exit contract (`git bisect run`) and the report's integrity, tried as a hostile user would: planted faults
decide every branch, not live races that may fail to fire on a loaded machine."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tensorflow as tf

from opbisect import errors
from opbisect.cli import main
from opbisect.execute import preflight
from opbisect.record.model import RECORD_VERSION

from conftest import NOISE_STEP, child_env, cli, trace, write_script

# A numpy_function that varies only on the calls listed: each pass of the experiment runs the step once per run,
# in a fixed order, so a fault can be planted in exactly the passes a branch needs. With runs=3 and 2 magnitude runs:
# - when the plain step under your config (calls 1-3) varies: pinned = 4-6, instrumented = 7-9;
# - when it gives one result: instrumented = 4-6, then the magnitude runs (7-8) if it found sources, then the pinned
#   pass (9-11) only if the instrumented runs did not all give the plain step's result.
PLANTED = """
calls = [0]
VARY_ON = {vary_on}


def planted(x):
    calls[0] += 1
    return (x + np.float32(calls[0] if calls[0] in VARY_ON else 0)).astype(np.float32)


w = tf.Variable(tf.ones([4]), name="w")


@tf.function
def step(x):
    y = tf.numpy_function(planted, [x], tf.float32, name="planted")
    w.assign_add(tf.ensure_shape(y, [4]))
    return tf.reduce_sum(w)


inputs = (tf.ones([4]),)
"""


def planted(run_step, vary_on: set, runs: int = 3, **settings):
    """The planted step, traced with `runs` runs and 2 magnitude runs (the order above); no replay, whose runs of
    the planted op alone would take calls too."""
    return run_step(PLANTED.format(vary_on=sorted(vary_on) or "set()"), runs=runs, magnitude_runs=2, replay=False,
                    **settings)


def test_a_difference_only_capture_creates_is_an_observer_effect_and_exits_0(run_step):
    t = planted(run_step, set(range(7, 13)), runs=6)  # every instrumented run differs, no plain run (15-20 pinned)
    assert t.code == 0 and t.record.facts.observer.effect == "created"
    assert t.record.pinned.runs == 6 and t.record.pinned.first_differing_step() is None  # its baseline ran
    assert t.sources == ["planted"] and bool(t.row("planted")["observer_effect"])


def test_a_step_whose_instrumented_runs_give_the_plain_result_needs_no_pinned_pass(run_step):
    t = planted(run_step, set())  # nothing varies: calls 1-3 plain, 4-6 instrumented, and no more
    assert t.code == 0 and t.record.pinned is None
    assert t.record.facts.grappler.config == "pinned" and t.record.facts.observer.effect == "none"
    assert t.record.analyses[0].instrumented.as_runs().results() == t.record.default.at(1).results()


def test_a_difference_in_too_few_runs_to_blame_capture_is_inconclusive_and_says_what_was_seen(run_step):
    t = planted(run_step, {4, 5, 6})  # 2 of 3 instrumented runs off the common result, 0 of 3 plain: p = 0.4
    o = t.record.facts.observer
    assert t.code == 0 and o.effect == "inconclusive"
    assert (o.plain_fired, o.plain_runs, o.instrumented_fired, o.instrumented_runs) == (0, 3, 2, 3)
    assert any("2 of 3 instrumented runs: inconclusive" in line for line in t.lines)


def test_a_difference_capture_hides_exits_1_with_no_source(run_step):
    t = planted(run_step, set(range(1, 13)), runs=6)
    assert t.code == 1 and t.record.facts.observer.effect == "hid" and t.sources == []


def test_when_pinning_hides_the_difference_the_analysis_runs_under_your_config(run_step):
    t = planted(run_step, set(range(1, 7)), runs=6)  # varies under your grappler config only
    assert t.code == 1
    assert t.record.facts.grappler.config == "default" and "hides" in t.record.facts.grappler.reason
    assert t.record.pinned.first_differing_step() is None


def test_a_grappler_claim_on_too_few_runs_is_called_inconclusive(run_step):
    t = planted(run_step, {1, 2, 3})  # 2 of 3 default runs differ, 0 of 3 pinned
    assert t.code == 1 and t.record.facts.grappler.config == "default"
    assert "inconclusive" in t.record.facts.grappler.reason and "hides" not in t.record.facts.grappler.reason


def test_when_pinning_creates_a_difference_your_config_decides_and_it_exits_0(run_step):
    t = planted(run_step, {4, 5, 6, 9, 10, 11})  # varies only pinned: the instrumented step (4-6), the pinned pass
    assert t.code == 0 and t.record.facts.grappler.config == "default"
    assert t.record.default.first_differing_step() is None and t.record.pinned.first_differing_step() == 1


def test_no_pin_grappler_analyses_your_config_and_runs_no_pinned_pass(run_step):
    t = planted(run_step, set(range(1, 20)), pin_grappler=False)
    assert t.code == 1 and t.record.pinned is None and t.record.facts.grappler.config == "default"
    assert t.sources == ["planted"] and t.row("planted")["kind"] == "op"


def test_shuffles_without_a_seed_or_reshuffling_are_named():
    tf.random.set_seed(None)  # another test may have set the global seed, which seeds every shuffle
    unseeded = preflight.dataset_findings(tf.data.Dataset.range(8).shuffle(8))
    assert any("has no seed" in f.message for f in unseeded)
    seeded = preflight.dataset_findings(tf.data.Dataset.range(8).shuffle(8, seed=1, reshuffle_each_iteration=True))
    assert [f.level for f in seeded] == ["note"] and "reshuffles" in seeded[0].message
    fixed = preflight.dataset_findings(tf.data.Dataset.range(8).shuffle(8, seed=1, reshuffle_each_iteration=False))
    assert fixed == []


# -- exit codes --------------------------------------------------------------------------------------------------
def test_no_tensorflow_cannot_be_tested(tmp_path):
    fake = tmp_path / "fake" / "tensorflow"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('planted: no TensorFlow')\n")
    script = write_script(tmp_path, "step", "")
    done = subprocess.run([sys.executable, "-m", "opbisect", "trace", str(script), "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, env=child_env(None, fake.parent))
    assert done.returncode == 125 and "TensorFlow is not importable" in done.stderr.splitlines()[-1]


def test_a_gpu_asked_for_where_none_is_cannot_be_tested(capsys, tmp_path):
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU")
    script = write_script(tmp_path, "step", PLANTED.format(vary_on="set()"))
    assert main(["trace", str(script), "--device", "gpu", "--out", str(tmp_path / "r")]) == 125
    assert "sees no GPU" in capsys.readouterr().err


def test_the_cpu_asked_for_where_tensorflow_already_started_on_a_gpu_is_a_usage_error(capsys, monkeypatch, tmp_path):
    # From Python, in a process that already ran TensorFlow on a GPU: TensorFlow refuses to hide it (its own
    # RuntimeError, planted here with the GPU, which this machine may lack); never an internal error
    def refused(*args):
        raise RuntimeError("Visible devices cannot be modified after being initialized")

    listed = tf.config.list_physical_devices
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: ["GPU:0"] if kind == "GPU" else listed(kind))
    monkeypatch.setattr(tf.config, "set_visible_devices", refused)
    script = write_script(tmp_path, "step", PLANTED.format(vary_on="set()"))
    assert main(["trace", str(script), "--device", "cpu", "--out", str(tmp_path / "r")]) == 128
    assert "fresh process" in capsys.readouterr().err.splitlines()[-1]
    assert not (tmp_path / "r").exists() or list((tmp_path / "r").iterdir()) == []


def test_state_that_does_not_come_back_cannot_be_tested(monkeypatch, run_step):
    from opbisect.execute import snapshot

    monkeypatch.setattr(snapshot.Snapshot, "restore", lambda self: None)  # planted: restoring does nothing
    with pytest.raises(Exception) as exc:
        planted(run_step, set())
    assert getattr(exc.value, "exit_code", None) == 125 and "bit for bit" in str(exc.value)


def test_an_internal_error_is_never_a_verdict(capsys, monkeypatch, tmp_path):
    from opbisect.analysis import facts

    def broken(*args):
        raise RuntimeError("planted bug")

    monkeypatch.setattr(facts, "verdict", broken)
    script = write_script(tmp_path, "step", PLANTED.format(vary_on="set()"))
    code = main(["trace", str(script), "--runs", "2", "--out", str(tmp_path / "r"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 170 and "internal error (RuntimeError: planted bug)" in err.splitlines()[-1]
    assert list((tmp_path / "r").iterdir()) == []  # the staged report is gone


@pytest.mark.parametrize("content, why", [
    ("[]", "JSON an array"), ("null", "JSON null"), ("42", "JSON a number"), ("{", "not JSON"),
    ("[" * 100000 + "]" * 100000, "nested too deeply"),
    (f'{{"version": {RECORD_VERSION}, "meta": {{}}}}', "not a valid"),
    ('{"version": 1}', "of version"),
])
def test_report_refuses_what_is_no_record_with_one_line_and_exit_128(capsys, tmp_path, content, why):
    bogus = tmp_path / "x.json"
    bogus.write_text(content)
    assert main(["report", str(bogus)]) == 128
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and why in err


def test_report_of_a_folder_or_a_missing_file_is_a_usage_error(capsys, tmp_path):
    assert main(["report", str(tmp_path)]) == 128 and "no such record" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "nope.json")]) == 128


def _good_report(run_step, tmp_path) -> Path:
    planted(run_step, {7, 8})
    return tmp_path / "reports" / "model_step"


def test_a_record_that_does_not_validate_leaves_the_good_report_as_it_was(capsys, run_step, tmp_path):
    folder = _good_report(run_step, tmp_path)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    data = json.loads((folder / "record.json").read_text())
    (folder / "record.json").write_text(json.dumps({**data, "analyses": []}))
    assert main(["report", str(folder)]) == 128 and "no step analysis" in capsys.readouterr().err
    after = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert {k: v for k, v in after.items() if k != "record.json"} == \
        {k: v for k, v in before.items() if k != "record.json"}


def test_report_reads_a_record_from_a_pipe_and_writes_only_where_told(run_step, tmp_path):
    folder = _good_report(run_step, tmp_path)
    done = subprocess.run(["bash", "-c", f"{sys.executable} -m opbisect report <(cat {folder / 'record.json'}) "
                                         f"--out {tmp_path / 'again'}"], capture_output=True, text=True,
                          env=child_env())
    assert done.returncode == 0, done.stderr  # planted on the instrumented calls only: an observer effect
    assert (tmp_path / "again" / "model_step" / "sources.csv").read_text() == (folder / "sources.csv").read_text()


def test_an_out_that_cannot_hold_the_report_fails_before_the_script_runs(capsys, tmp_path):
    marker = tmp_path / "loaded"
    script = write_script(tmp_path, "step", f"open({str(marker)!r}, 'w').close()\n" + PLANTED.format(vary_on="set()"))
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    for out in (a_file, a_file / "below"):
        assert main(["trace", str(script), "--out", str(out)]) == 128
    assert "is a file" in capsys.readouterr().err and not marker.exists()


def test_a_report_of_another_script_with_the_same_name_is_not_replaced(capsys, run_step, tmp_path):
    folder = _good_report(run_step, tmp_path)
    other = tmp_path / "elsewhere"
    other.mkdir()
    script = write_script(other, "model_step", PLANTED.format(vary_on="set()"))
    before = (folder / "report.json").read_text()
    assert main(["trace", str(script), "--out", str(folder.parent)]) == 128
    assert "holds the report of" in capsys.readouterr().err and (folder / "report.json").read_text() == before


def test_a_report_is_written_with_the_umask_and_replaced_whole(run_step, tmp_path):
    old = os.umask(0o027)
    try:
        folder = _good_report(run_step, tmp_path)
    finally:
        os.umask(old)
    assert oct(folder.stat().st_mode & 0o777) == oct(0o750)
    assert {oct(p.stat().st_mode & 0o777) for p in folder.iterdir()} == {oct(0o640)}
    assert sorted(p.name for p in folder.parent.iterdir()) == ["model_step"]  # no staging or old folder left


def test_a_report_that_cannot_be_written_exits_129_and_leaves_nothing(tmp_path):
    script = write_script(tmp_path, "step", PLANTED.format(vary_on="set()"))

    def small_files():  # planted: a disk that takes no file over 4 kB (SIGXFSZ ignored: the write fails instead)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    done = subprocess.run([sys.executable, "-m", "opbisect", "trace", str(script), "--runs", "2", "--out",
                           str(tmp_path / "r"), "--no-progress"], capture_output=True, text=True,
                          env=child_env(), preexec_fn=small_files)
    assert done.returncode == 129, done.stderr[-2000:]
    assert "nothing was replaced" in done.stderr.splitlines()[-1] and list((tmp_path / "r").iterdir()) == []


SLOW = PLANTED.replace("def planted(x):\n", "def planted(x):\n    open(MARKER, 'a').write('x')\n    time.sleep(0.3)\n")


def _start(tmp_path, *extra) -> tuple[subprocess.Popen, Path]:
    marker = tmp_path / "started"
    pid = f"open({str(tmp_path / 'pid')!r}, 'w').write(str(__import__('os').getpid()))\n"
    header = f"import time\nMARKER = {str(marker)!r}\n{pid}"
    script = write_script(tmp_path, "slow", header + SLOW.format(vary_on="set()"))
    env = {**child_env(), "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    # 200 runs of a step that sleeps 0.3 s: a minute at least, so the signal finds the run still going on a machine
    # however loaded; it ends at the signal, not after them
    proc = subprocess.Popen([sys.executable, "-m", "opbisect", "trace", str(script), "--runs", "200", "--out",
                             str(tmp_path / "r"), "--no-progress", *extra], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while not marker.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert marker.exists() and proc.poll() is None, proc.communicate()[1][-2000:]
    return proc, tmp_path


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in state  # a zombie has ended


def test_sigterm_ends_the_run_with_143_and_no_report_left_half_written(tmp_path):
    proc, folder = _start(tmp_path)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143 and "terminated" in err.splitlines()[-1], err[-3000:]
    assert list((folder / "r").iterdir()) == []


# Python runs a signal's handler wherever the main thread is; inside a __del__ it drops what the handler raises. So
# planted, a SIGTERM once ended a trace in CI with exit 0 and a report.
DROPPED = """
import os
import signal


class StopInFinalizer:
    def __del__(self):
        os.kill(os.getpid(), signal.{name})
        sum(range(1000))  # the handler runs at this line's first bytecode: inside __del__


StopInFinalizer()
"""


class _StopInFinalizer:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        sum(range(1000))


def test_a_stop_python_dropped_is_raised_at_the_next_checkpoint_and_forgotten_after_the_command(monkeypatch):
    dropped, went_on = [], []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: dropped.append(u.exc_type))
    with pytest.raises(errors.Terminated):
        with errors.stops_caught():
            _StopInFinalizer()  # its SIGTERM's Terminated is raised inside __del__, and dropped
            went_on.append(True)
            errors.stop_if_came()
    assert dropped == [errors.Terminated] and went_on == [True]
    errors.stop_if_came()  # the command's stop, forgotten after it
    ignored = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a background job's
    try:
        with errors.stops_caught():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, ignored)


@pytest.mark.parametrize("name, code", [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_stop_signal_whose_exception_python_dropped_still_ends_the_run_with_no_report(tmp_path, name, code):
    script = write_script(tmp_path, "dropped", DROPPED.format(name=name) + PLANTED.format(vary_on="set()"))
    # cli starts the command with SIGINT at its default, as a terminal does (not ignored, as in a background job)
    done = cli("trace", str(script), "--runs", "3", "--out", str(tmp_path / "r"), "--no-fresh-check")
    assert "Exception ignored in" in done.stderr  # Python dropped it, as planted
    assert done.returncode == code, done.stderr[-3000:]
    assert not (tmp_path / "r" / "dropped").exists()


def test_sigterm_to_the_parent_of_processes_ends_the_child_and_its_temp_folder(tmp_path):
    proc, folder = _start(tmp_path, "--processes", "2")
    child = int((folder / "pid").read_text())
    assert child != proc.pid
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    deadline = time.time() + 60
    while not _gone(child) and time.time() < deadline:
        time.sleep(0.2)
    assert _gone(child) and list((folder / "tmp").iterdir()) == [] and list((folder / "r").iterdir()) == []


# -- git bisect run --------------------------------------------------------------------------------------------
def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True, env=env).stdout


def _bisecting(repo: Path, history: list[tuple[str, str]]) -> list[str]:
    """A repository with one commit of model_step.py per (message, body), bisect started between the first (good)
    and the last (bad): the commits' shas."""
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    shas = []
    for message, body in history:
        write_script(repo, "model_step", body)
        _git(repo, "add", "model_step.py")
        _git(repo, "commit", "-q", "-m", message)
        shas.append(_git(repo, "rev-parse", "HEAD").strip())
    _git(repo, "bisect", "start", shas[-1], shas[0])
    return shas


def test_git_bisect_run_finds_the_commit_that_made_the_step_nondeterministic_and_skips_a_broken_one(tmp_path):
    repo = tmp_path / "repo"
    clean = PLANTED.format(vary_on="set()")
    history = [("deterministic step", clean), ("tune", clean.replace("tf.ones([4])", "tf.ones([4]) * 2.0")),
               ("a broken revision", clean.replace("def step(x):", "def step(x:")),
               ("fix it", clean.replace("tf.ones([4])", "tf.ones([4]) * 2.0")),
               ("unseeded noise", clean.replace("w.assign_add(tf.ensure_shape(y, [4]))",
                                                "w.assign_add(tf.ensure_shape(y, [4]) + tf.random.uniform([4]))")),
               ("more", clean.replace("w.assign_add(tf.ensure_shape(y, [4]))",
                                      "w.assign_add(tf.ensure_shape(y, [4]) + tf.random.uniform([4]) * 0.5)"))]
    shas = _bisecting(repo, history)
    run = subprocess.run(["git", "bisect", "run", sys.executable, "-m", "opbisect", "trace", "model_step.py",
                          "--runs", "3", "--no-progress", "--out", str(tmp_path / "reports")], cwd=repo,
                         capture_output=True, text=True, env=child_env(), timeout=900)
    assert f"{shas[4]} is the first bad commit" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]
    log = _git(repo, "bisect", "log")
    assert f"# skip: [{shas[2]}]" in log  # the broken revision exited 125


def test_git_bisect_run_with_fix_finds_the_commit_no_fix_can_mend(tmp_path):
    """`git bisect run opbisect fix`: exit 0 where the fix makes the script reproducible (an unseeded random op: a
    seed), 1 where nothing it can apply does (a numpy_function's own unseeded Python), each revision's fix folder
    replacing the last in the one --out."""
    repo = tmp_path / "repo"
    clean = PLANTED.format(vary_on="set()")
    noise = "w.assign_add(tf.ensure_shape(y, [4]) + tf.random.uniform([4]))"
    python = "w.assign_add(tf.ensure_shape(y, [4]) + tf.numpy_function(lambda: np.random.default_rng().random(4, " \
             "np.float32), [], tf.float32))"
    update = "w.assign_add(tf.ensure_shape(y, [4]))"
    history = [("deterministic step", clean),
               ("an unseeded random op: a seed mends it", clean.replace(update, noise)),
               ("unseeded Python in the step", clean.replace(update, python)),
               ("more", clean.replace(update, python.replace("[4]) +", "[4]) * 2 +")))]
    shas = _bisecting(repo, history)
    run = subprocess.run(["git", "bisect", "run", sys.executable, "-m", "opbisect", "fix", "model_step.py",
                          "--runs", "3", "--verify-runs", "3", "--timing-runs", "5", "--no-progress",
                          "--out", str(tmp_path / "reports")], cwd=repo,
                         capture_output=True, text=True, env=child_env(), timeout=1500)
    assert f"{shas[2]} is the first bad commit" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]
    fixes = list((tmp_path / "reports").iterdir())
    assert [f.name for f in fixes] == ["model_step-fix"]  # one folder, the last revision's, whole: no staging left
    last = json.loads((fixes[0] / "fix.json").read_text())
    assert last["stopped"] in ("REPRODUCIBLE", "NO_REMEDY") and (fixes[0] / "summary.txt").exists()


def test_a_step_that_returns_nothing_gets_a_verdict(run_step):
    t = run_step("""
        w = tf.Variable(tf.ones([4]), name="w")


        @tf.function
        def step(x):
            w.assign_add(x * tf.random.uniform([4], name="noise"))


        inputs = (tf.ones([4]),)
        """, runs=3)
    assert t.code == 1 and t.sources == ["noise/RandomUniform"]


def test_a_keras_model_whose_x_is_a_dict_is_traced(tmp_path):
    script = write_script(tmp_path, "two_inputs", """
        import keras

        keras.utils.set_random_seed(0)
        a, b = keras.Input((4,), name="a"), keras.Input((4,), name="b")
        model = keras.Model({"a": a, "b": b}, keras.layers.Dense(1)(keras.layers.Concatenate()([a, b])))
        model.compile(optimizer="sgd", loss="mse")
        data = ({"a": np.ones((8, 4), np.float32), "b": np.ones((8, 4), np.float32)}, np.ones((8, 1), np.float32))
        """)
    t = trace(script, tmp_path / "reports", runs=2)
    assert t.code == 0 and t.record.meta.form == "keras" and t.csv.empty


def test_max_runs_looks_harder_at_a_step_that_gave_one_result(run_step):
    t = run_step(PLANTED.format(vary_on="set()"), runs=2, max_runs=5)
    m, v = t.record.meta, t.record.facts.verdict
    assert t.code == 0 and m.runs == 5 and t.record.default.runs == 5
    assert len(t.record.analyses[0].instrumented.fps) == 5
    assert m.looked_harder == "the step gave one result"
    assert v.rate_bound == pytest.approx(1 - 0.05 ** (1 / 5))


def test_looking_harder_keeps_a_difference_the_first_runs_saw(run_step):
    """2 of 3 plain runs differ, then grappler's part is too few runs to judge, so --max-runs runs every pass again;
    the planted race fires in none of those 6 runs. Differing results were seen: the verdict stays nondeterministic."""
    t = planted(run_step, {1, 2, 3}, max_runs=6)
    v = t.record.facts.verdict
    assert t.record.meta.runs == 6 and t.record.meta.looked_harder and t.record.default.first_differing_step() is None
    assert t.code == 1 and v.nondeterministic and v.rate_bound is None
    assert "3 runs" in v.evidence[0] and "looking harder, 6 runs gave one result" in v.evidence[0]


def test_max_runs_no_more_than_runs_is_a_usage_error(capsys, tmp_path):
    script = write_script(tmp_path, "step", NOISE_STEP)
    assert main(["trace", str(script), "--runs", "4", "--max-runs", "3", "--out", str(tmp_path)]) == 128


def test_an_error_summary_is_the_line_that_says_what_went_wrong():
    from opbisect.targets.user_errors import error_summary

    # a graph-execution error in TensorFlow's layout, the line saying what went wrong after the "stack traces
    # unavailable" placeholder (on the H200 in session 16 the summary kept only that placeholder)
    text = ("Graph execution error:\n\nDetected at node step/foo defined at (most recent call last):\n"
            "<stack traces unavailable>\nNo registered 'PyFunc' OpKernel for 'GPU' devices compatible with node "
            "{{node foo}}\n\t [[{{node foo}}]] [Op:__inference_body_12]")
    assert error_summary(tf.errors.NotFoundError(None, None, text)) == (
        "NotFoundError: No registered 'PyFunc' OpKernel for 'GPU' devices compatible with node {{node foo}}")
