"""The command line as a user meets it: exit codes, one-line errors, the user's traceback, no half reports."""

from __future__ import annotations

import pandas as pd
import pytest

from opbisect.cli import main
from opbisect.record import store

from conftest import EXAMPLES, NOISE_STEP, cli, write_script


def run_main(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_subprocess_names_the_planted_op_and_report_remakes_the_same_csv(tmp_path):
    script = write_script(tmp_path, "noisy", NOISE_STEP)
    done = cli("trace", str(script), "--runs", "3", "--out", str(tmp_path / "r"), "--no-progress")
    assert done.returncode == 1, done.stderr
    csv = pd.read_csv(tmp_path / "r" / "noisy" / "sources.csv")
    assert list(csv["op_name"]) == ["noise/RandomUniform"] and list(csv["rank"]) == [1]
    # The saved record re-makes the same report without running anything, in place or elsewhere.
    again = cli("report", str(tmp_path / "r" / "noisy"), "--out", str(tmp_path / "again"))
    assert again.returncode == 1, again.stderr
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "again" / "noisy" / "sources.csv"), csv)
    assert (tmp_path / "again" / "noisy" / "repro" / "1_RandomUniform.py").exists()  # the reproducer comes along
    in_place = cli("report", str(tmp_path / "r" / "noisy" / "record.json"), "--html")
    assert in_place.returncode == 1 and (tmp_path / "r" / "noisy" / "report.html").exists()
    assert (tmp_path / "r" / "noisy" / "repro" / "1_RandomUniform.npz").exists()
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["noisy"]


def test_missing_script_cannot_be_tested_at_this_revision(capsys, tmp_path):
    code, out, err = run_main(capsys, "trace", str(tmp_path / "nope.py"), "--out", str(tmp_path))
    assert code == 125 and err.strip() == f"opbisect: cannot test: no such file: {tmp_path / 'nope.py'}"
    assert list(tmp_path.iterdir()) == []  # not even the staging folder is left


def test_bad_arguments_are_usage_errors_that_abort_git_bisect(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["trace"])
    assert exc.value.code == 128
    capsys.readouterr()
    code, _, err = run_main(capsys, "trace", str(EXAMPLES / "bert_like.py"), "--runs", "1")
    assert code == 128 and err.strip() == "opbisect: --runs must be at least 2 (got 1)"
    code, _, err = run_main(capsys, "trace", str(EXAMPLES / "bert_like.py"), "--magnitude-runs", "-3")
    assert code == 128 and err.strip() == "opbisect: --magnitude-runs must be at least 0 (got -3)"
    for ladder, why in (("1", "at least two rungs"), ("1,0", "got '0'"), ("all,all", "a rung twice")):
        code, _, err = run_main(capsys, "trace", str(EXAMPLES / "bert_like.py"), "--replicas", ladder)
        assert code == 128 and why in err
    code, _, err = run_main(capsys, "trace", str(EXAMPLES / "bert_like.py"), "--replicas", "1,all",
                            "--processes", "2")
    assert code == 128 and "use one" in err
    for other in (("--processes", "2"), ("--replicas", "1,all")):
        code, _, err = run_main(capsys, "trace", str(EXAMPLES / "bert_like.py"), "--workers", "2", *other)
        assert code == 128 and "use one" in err


def test_syntax_error_shows_the_users_traceback_and_exits_2(capsys, tmp_path):
    path = write_script(tmp_path, "broken", "def step(:\n    pass\n")
    code, _, err = run_main(capsys, "trace", str(path), "--out", str(tmp_path))
    assert code == 125
    assert "broken.py" in err and "SyntaxError" in err and "has a syntax error (line 3)" in err
    assert list(tmp_path.iterdir()) == [path]  # no report, no staging folder


def test_script_without_step_says_what_it_found(capsys, tmp_path):
    path = write_script(tmp_path, "nostep", "learning_rate = 0.1\ndef train():\n    pass\n")
    code, _, err = run_main(capsys, "trace", str(path), "--out", str(tmp_path))
    assert code == 125
    assert "defines no `step`" in err and "found: learning_rate, train" in err  # modules are not listed


def test_step_without_inputs_and_inputs_of_the_wrong_type_are_named(capsys, tmp_path):
    path = write_script(tmp_path, "noinputs", "@tf.function\ndef step(x):\n    return x\n")
    code, _, err = run_main(capsys, "trace", str(path), "--out", str(tmp_path))
    assert code == 125 and "defines `step` but no `inputs`" in err
    path = write_script(tmp_path, "badinputs", "@tf.function\ndef step(x):\n    return x\ninputs = 3\n")
    code, _, err = run_main(capsys, "trace", str(path), "--out", str(tmp_path))
    assert code == 125 and "`inputs` must be a tuple" in err and "got int" in err


def test_inputs_that_do_not_fit_the_step_show_the_trace_error(capsys, tmp_path):
    path = write_script(tmp_path, "arity", "@tf.function\ndef step(x, y):\n    return x + y\ninputs = (1.0,)\n")
    code, _, err = run_main(capsys, "trace", str(path), "--out", str(tmp_path))
    assert code == 125 and "tracing `arity.py`'s step raised TypeError" in err
    assert list(tmp_path.iterdir()) == [path]  # no report, no staging folder


def test_a_step_that_raises_shows_the_users_traceback(capsys, tmp_path):
    path = write_script(tmp_path, "raises", """
        def check(x):
            raise ValueError("the batch is empty")


        @tf.function
        def step(x):
            check(x)
            return x


        inputs = (tf.ones([2]),)
        """)
    code, _, err = run_main(capsys, "trace", str(path), "--out", str(tmp_path))
    assert code == 125
    assert 'raise ValueError("the batch is empty")' in err and "ValueError" in err.splitlines()[-1]
    assert list(tmp_path.iterdir()) == [path]  # no report, no staging folder


def test_a_step_that_fails_at_run_time_exits_2_without_a_report(capsys, tmp_path):
    path = write_script(tmp_path, "runtime", """
        @tf.function
        def step(x):
            tf.debugging.assert_positive(x, message="x must be positive")
            return x * 2


        inputs = (tf.constant([-1.0]),)
        """)
    code, _, err = run_main(capsys, "trace", str(path), "--out", str(tmp_path))
    assert code == 125 and "the step raised InvalidArgumentError" in err and "x must be positive" in err
    assert list(tmp_path.iterdir()) == [path]  # no report, no staging folder


def test_nan_outputs_string_and_empty_tensors_get_a_correct_verdict(capsys, tmp_path):
    path = write_script(tmp_path, "odd", """
        w = tf.Variable(tf.ones([3]), name="w")


        @tf.function
        def step(x, words, empty):
            nan = tf.math.log(x - 10.0)  # NaN, deterministically
            tokens = tf.strings.split(words)
            count = tf.cast(tf.size(tokens), tf.float32)
            w.assign_add(nan * 0.0 + count + tf.reduce_sum(empty))
            return nan, tokens, empty * 2


        inputs = (tf.ones([3]), tf.constant("a b c"), tf.zeros([0, 4]))
        """)
    code, out, err = run_main(capsys, "trace", str(path), "--out", str(tmp_path), "--runs", "3", "--no-progress")
    assert code == 0, err
    assert "1 result: deterministic" in out and "string" in out  # string outputs are counted as skipped
    # A clean verdict says how hard it looked: a rare race can hide in 3 runs.
    assert "no source found: nothing differed in 3 runs" in out
    assert pd.read_csv(tmp_path / "odd" / "sources.csv").empty


def test_report_of_a_file_that_is_no_record_exits_128(capsys, tmp_path):
    bogus = tmp_path / "x.runs.json"
    bogus.write_text('{"version": 99}')
    code, _, err = run_main(capsys, "report", str(bogus))
    assert code == 128 and "is not an opbisect record" in err


def test_every_option_reaches_a_child_process_unchanged():
    import dataclasses
    from pathlib import Path

    from opbisect.cli import parse
    from opbisect.settings import TraceSettings

    changed = TraceSettings(script=Path("a b/step.py"), runs=7, out=Path("o"), step_name="s", inputs_name="i",
                            device="cpu", pin_grappler=False, fingerprint="wsum", steps=3, processes=2,
                            magnitude_runs=4, replay=False, replay_runs=9, html=True, progress=False, max_runs=12,
                            patch="r/s.csv,AddN", replicas="1,all", replica_limit=2, workers=3,
                            worker_index=1, agree_dir=Path("a g"), at="fit:2", script_args=("--epochs", "3", "--"),
                            fresh=False, seed="7", probe=Path("p q/probe.json"), pins="python,hash",
                            script_check=False, check_steps=4, tap_every=True)
    defaults = {f.name: f.default for f in dataclasses.fields(TraceSettings)}
    assert all(getattr(changed, k) != v for k, v in defaults.items() if k != "script")  # every option is set
    again = TraceSettings.from_namespace(parse(["trace", *changed.to_argv()]))
    assert again == changed


def test_every_verify_option_reaches_its_child_processes_unchanged():
    import dataclasses
    from pathlib import Path

    from opbisect.cli import parse
    from opbisect.settings import VerifySettings

    changed = VerifySettings(script=Path("a b/step.py"), patch="r/s.csv", runs=7, out=Path("o"), step_name="s",
                             inputs_name="i", device="cpu", fingerprint="wsum", switches=False, variant="global",
                             exchange=Path("/tmp/x"), cpu_reference="on", timing_runs=3, steps=4, at="call:2",
                             script_args=("a", "--b"), confirm_runs=50, progress=False)
    defaults = {f.name: f.default for f in dataclasses.fields(VerifySettings)}
    assert all(getattr(changed, k) != v for k, v in defaults.items() if k != "script")  # every option is set
    again = VerifySettings.from_namespace(parse(["verify", *changed.to_argv()]))
    assert again == changed


NO_CALL = """
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)  # its Dense starts from the same weights in every process: the fresh check agrees


    class NoCall(keras.Model):  # a custom train_step and no call(), as in the keras-io GAN
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)

        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((self.dense(x) - y) ** 2)
            grads = tape.gradient(loss, self.dense.trainable_weights)
            self.optimizer.apply(grads, self.dense.trainable_weights)
            {raise_}
            return {{"loss": loss}}


    model = NoCall()
    model.compile(optimizer="sgd")
    data = (np.ones((4, 2), np.float32), np.ones((4, 1), np.float32))
    """


def test_a_model_with_its_own_train_step_and_no_call_is_built_as_fit_builds_it(capsys, tmp_path):
    path = write_script(tmp_path, "no_call", NO_CALL.format(raise_=""))
    code, _, _ = run_main(capsys, "trace", str(path), "--runs", "2", "--out", str(tmp_path / "r"))
    record = store.load(tmp_path / "r" / "no_call")
    assert code == 0, [(s.op_name, s.kind, s.seen_across, s.known_remedy) for s in record.sources]
    restored = set(record.meta.initial_state)
    assert any("dense" in k and "kernel" in k for k in restored) and any("iteration" in k for k in restored)


def test_a_keras_model_that_cannot_be_built_shows_keras_own_message(capsys, tmp_path):
    path = write_script(tmp_path, "no_call", NO_CALL.format(raise_='raise ValueError("the batch has no labels")'))
    code, _, err = run_main(capsys, "trace", str(path), "--out", str(tmp_path / "r"))
    last = err.splitlines()[-1]
    assert code == 125 and "Unable to automatically build the model" in last and "the batch has no labels" in last
    assert "no_call.py" in err  # the user's frame
