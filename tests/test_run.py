"""`opbisect run` keeps the contract: its --patch is read before the script runs (one line, 128), the script's own
exit and errors pass through as python would show them, a missing script or a folder is one line; and every command
runs a script with the Keras it chose, never mistakes a script for the target contract, and re-runs into one --out.
Each case failed before its fix (issue 40's battery)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from opbisect.execute import children

from conftest import EXAMPLES, child_env, write_script

SETUP = "print('setup ran')\n"
TRAINS = """
keras_seed = 3
w = tf.Variable(tf.ones([4]), name="w")


@tf.function
def train_step(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * x)
    w.assign_sub(0.1 * tape.gradient(loss, w))
    return loss


for k in range(3):
    train_step(tf.ones([4]) * float(k + 1))
print("trained", w.numpy().tolist())
"""


def opbisect(*args, env=None, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "opbisect", *map(str, args)], capture_output=True, text=True,
                          env={**child_env(), "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})}, timeout=900, cwd=cwd)


def said(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("opbisect:")]


@pytest.mark.parametrize("patch, why", [
    ("nope.csv", "no such file"),
    ("empty.csv", "names no op to replace"),  # what fix wrote when it found nothing to patch
    ("binary.csv", "not a report's CSV"),
    ("columns.csv", "no op_name and kind columns"),
    ("zero.csv", "not a report's CSV"),
    ("README.md", "not a report's CSV"),  # a file that is no CSV
    ("folder", "not a report's folder"),
    ("seeds.csv", "its sources are of kind init"),  # a report whose sources no patch fixes
])
def test_a_bad_patch_is_one_line_and_128_before_the_script_runs(tmp_path, patch, why):
    (tmp_path / "empty.csv").write_text("op_name,kind\n")
    (tmp_path / "binary.csv").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "columns.csv").write_text("name,type\nx,y\n")
    (tmp_path / "zero.csv").write_text("")
    (tmp_path / "README.md").write_text("# a title\n\nsome, text, with, commas\nand lines\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "seeds.csv").write_text("op_name,kind,first_step\ndense/kernel,init,0\n")
    script = write_script(tmp_path, "setup", SETUP + TRAINS)
    done = opbisect("run", "--patch", tmp_path / patch, script)
    assert done.returncode == 128, done.stderr[-2000:]
    assert len(said(done)) == 1 and why in said(done)[0] and "Traceback" not in done.stderr
    assert "setup ran" not in done.stdout  # refused before the script ran


def test_a_patch_naming_ops_the_training_lacks_is_one_line_and_128(tmp_path):
    script = write_script(tmp_path, "trains", TRAINS)
    done = opbisect("run", "--patch", "NoSuchOp", script)
    assert done.returncode == 128 and len(said(done)) == 1 and "NoSuchOp" in said(done)[0]
    assert "Traceback" not in done.stderr and "in user code" not in done.stderr


def test_the_scripts_sys_exit_passes_through_as_python_shows_it(tmp_path):
    script = write_script(tmp_path, "fatal", "import sys\nprint('setup')\nsys.exit('fatal: config missing')\n")
    python = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=child_env())
    done = opbisect("run", script)
    assert (done.returncode, python.returncode) == (1, 1)
    assert "fatal: config missing" in done.stderr.splitlines()[0]  # python's own message, first
    code = write_script(tmp_path, "three", "import sys\nsys.exit(3)\n")
    assert opbisect("run", code).returncode == 3


def test_a_scripts_own_error_shows_its_frames_and_one_line(tmp_path):
    script = write_script(tmp_path, "raises", "def helper():\n    raise ValueError('bad shape')\n\n\nhelper()\n")
    done = opbisect("run", script)
    assert done.returncode == 125 and len(said(done)) == 1 and "ValueError: bad shape" in said(done)[0]
    frames = [line for line in done.stderr.splitlines() if line.strip().startswith("File ")]
    assert frames and all("raises.py" in line for line in frames)  # opbisect's and runpy's frames peeled off


@pytest.mark.parametrize("target, code", [("missing.py", 125), ("", 128)])
def test_a_missing_script_or_a_folder_is_one_line(tmp_path, target, code):
    done = opbisect("run", tmp_path / target)
    assert done.returncode == code and len(said(done)) == 1 and "Traceback" not in done.stderr


def test_two_runs_print_one_digest_and_steps_stop_the_training(tmp_path):
    script = write_script(tmp_path, "trains", TRAINS)
    runs = [opbisect("run", script) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs)
    digests = [said(r)[-1].split()[3] for r in runs]  # "opbisect: final weights <digest> (...)"
    assert digests[0] == digests[1] and len(digests[0]) == 16
    short = opbisect("run", "--steps", "2", "--digests", tmp_path / "d.json", script)
    assert "trained" not in short.stdout  # stopped after its second step: the script's last line never ran
    steps = json.loads((tmp_path / "d.json").read_text())["steps"]
    assert len(steps) == 3 and steps[0] != steps[1] != steps[2]  # at the call, after step 1, after step 2


LEGACY = """
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"{after}
import numpy as np
import tensorflow as tf{layers}

print("keras line:", {which})
tf.keras.utils.set_random_seed(1)
model = tf.keras.Sequential([tf.keras.layers.Dense(4, input_shape=(3,)), tf.keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(np.ones((8, 3), "float32"), np.ones((8, 1), "float32"), epochs=1, verbose=0)
"""


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_script_that_picks_tf_keras_itself_trains_with_it(tmp_path, when):
    """TF_USE_LEGACY_KERAS set at the script's top (the TF docs' tf_keras notebooks), or after its own `import
    tensorflow`: under opbisect it gets what python gives it (opbisect imports no TensorFlow or Keras before it)."""
    body = LEGACY.format(after="" if when == "before" else "\nimport tensorflow", which=(
        "type(tf.keras.layers.Dense(1)).__module__.split('.')[0]"),
        layers="\nfrom tensorflow.keras import layers" if when == "before" else "")
    script = tmp_path / "legacy.py"
    script.write_text(body)
    python = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=child_env())
    assert "keras line: tf_keras" in python.stdout, python.stderr[-2000:]
    done = opbisect("trace", script, "--runs", "2", "--no-progress", "--no-fresh-check", "--out", tmp_path / "r")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "keras line: tf_keras" in (tmp_path / "r" / "legacy" / "script_output.txt").read_text()
    ran = opbisect("run", script)
    assert ran.returncode == 0 and "keras line: tf_keras" in ran.stdout


KERAS_IO_LOOP = """
import keras

keras.utils.set_random_seed(0)
inputs = keras.Input(shape=(4,))
model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
optimizer = keras.optimizers.SGD(0.1)
dataset = tf.data.Dataset.from_tensor_slices((np.ones((16, 4), "float32"), np.ones((16, 1), "float32"))).batch(4)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x) - y) ** 2)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_weights), model.trainable_weights))
    return loss


for step, (x, y) in enumerate(dataset):
    train_step(x, y)
open(MARKER, "w").write("the training ran to its end")
"""


@pytest.mark.parametrize("at", [[], ["--at", "step:train_step"]])
def test_a_module_level_loop_is_a_script_not_the_target_contract(tmp_path, at):
    """keras-io's loop at module level defines `inputs` (a keras.Input) and `step` (the loop's counter): it is run as
    a script and stopped at its first training call, never run to its end; `--at step:NAME` takes that call."""
    marker = tmp_path / "trained"
    script = write_script(tmp_path, "loop", f"MARKER = {str(marker)!r}\n" + KERAS_IO_LOOP)
    done = opbisect("trace", script, "--runs", "2", "--no-progress", "--no-fresh-check", "--out", tmp_path / "r",
                    *at)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not marker.exists()
    intercepted = json.loads((tmp_path / "r" / "loop" / "record.json").read_text())["meta"]["intercepted"]
    assert (intercepted["kind"], intercepted["name"]) == ("step", "train_step")


def test_fix_twice_into_one_out_replaces_the_fix(tmp_path):
    """A fix folder is a report like any other: `git bisect run opbisect fix ...` re-runs it at every revision."""
    script = write_script(tmp_path, "steady", "w = tf.Variable(tf.ones([4]), name='w')\n\n\n@tf.function\n"
                                              "def step(x):\n    w.assign_add(x)\n    return w.read_value()\n\n\n"
                                              "inputs = (tf.ones([4]),)\n")
    for _ in range(2):
        done = opbisect("fix", script, "--runs", "2", "--out", tmp_path / "r", "--no-progress")
        assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((tmp_path / "r" / "steady-fix" / "fix.json").read_text())["test"]["agreed"]
    assert [p.name for p in (tmp_path / "r").iterdir()] == ["steady-fix"]  # no staging or old folder left


def test_a_round_that_cannot_test_is_said_once_with_its_exit(tmp_path):
    script = write_script(tmp_path, "broken", "raise RuntimeError('planted: the data is missing')\n")
    done = opbisect("fix", script, "--runs", "2", "--out", tmp_path / "r", "--no-progress")
    assert done.returncode == 125 and len(said(done)) == 1
    assert said(done)[0].startswith("opbisect: round 1: cannot test:") and "planted" in said(done)[0]
    assert done.stderr.count("Traceback") == 1  # the user's traceback, once


@pytest.mark.parametrize("code", [125, 128, 129, 130, 143])
def test_a_childs_exit_is_the_parents_by_the_contract(code):
    err = children.failure(code, "some output\nopbisect: the child's own words\n", "round 2")
    assert (err.exit_code, str(err)) == (code, "round 2: the child's own words")


def test_a_child_that_crashed_is_an_internal_error():
    err = children.failure(-signal.SIGSEGV, "Fatal Python error: Segmentation fault\n", "round 1")
    assert err.exit_code == 170 and "Segmentation fault" in err.shown


def test_a_terminated_round_ends_the_fix_with_143(tmp_path):
    script = write_script(tmp_path, "killed", "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n")
    done = opbisect("fix", script, "--runs", "2", "--out", tmp_path / "r", "--no-progress")
    assert done.returncode == 143 and len(said(done)) == 1 and "round 1" in said(done)[0]
    assert not (tmp_path / "r" / "killed-fix").exists()


def test_run_on_an_example_with_its_patch_reaches_the_end(tmp_path):
    script = EXAMPLES / "zero_edit" / "tf_keras_fit.py"
    done = opbisect("run", "--patch", "gradient_tape/sequential/dense/BiasAdd/BiasAddGrad", script, "--", "1",
                    env={k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert said(done)[-1].startswith("opbisect: final weights ")


TWO_PHASES = """
import keras

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x, y = rng.integers(0, 100, (128, 16)), rng.integers(0, 4, (128,))
base = keras.Sequential([keras.layers.Embedding(100, 8, name="table"), keras.layers.GlobalAveragePooling1D()])
model = keras.Sequential([base, keras.layers.Dense(4)])
base.trainable = False
for optimizer in (keras.optimizers.SGD(0.1), keras.optimizers.Adam(0.05)):  # frozen, then thawed (fine-tuning)
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=64, shuffle=False, verbose=0)
    base.trainable = True
"""


def test_run_patches_a_model_compiled_again_so_the_thawed_layers_train(tmp_path):
    """Transfer learning under `opbisect run --patch`: the second compile's step is patched anew, so its thawed
    embedding trains in the second phase's two steps (a patch kept from the first compile left it as it was); and
    Keras 3's train function, Python around tf.functions of its own, is one step, not two."""
    script = write_script(tmp_path, "two_phases", TWO_PHASES)
    done = opbisect("run", "--patch", "BiasAddGrad", "--digests", tmp_path / "d.json", script)
    assert done.returncode == 0, done.stderr[-2000:]
    steps = json.loads((tmp_path / "d.json").read_text())["steps"]
    table = [next((v for k, v in step.items() if "/table/" in k), None) for step in steps]
    # at the first call (the model is built within it), then after each of the four steps, each digested once
    assert len(steps) == 5 and table[1] == table[2] != table[3] != table[4]


TWO_STEPS = """
a = tf.Variable(tf.ones([4]), name="a")
b = tf.Variable(tf.ones([3]), name="b")


@tf.function
def train_a(x):  # a GAN's two steps, say: the patch (from a trace of the first call) names an op of this one only
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.math.unsorted_segment_sum(a * x, [0, 1, 0, 1], 2, name="pooled") ** 2)
    a.assign_sub(0.1 * tape.gradient(loss, a))


@tf.function
def train_b(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.nn.bias_add(x, b) ** 2)
    b.assign_sub(0.1 * tape.gradient(loss, b))


for k in range(2):
    train_a(tf.ones([4]))
    train_b(tf.ones([2, 3]))
"""


def test_run_patches_each_step_with_the_ops_it_has_and_names_those_no_step_had(tmp_path):
    """A script that trains two steps: the patch's op is in the first only, so the second runs as it is (it was
    refused with 128); an op id that no step had is named once at the end, and the training still ends."""
    script = write_script(tmp_path, "two_steps", TWO_STEPS)
    both = opbisect("run", "--patch", "pooled", "--digests", tmp_path / "d.json", script)
    assert both.returncode == 0, both.stderr[-2000:]
    assert [line.split()[1] for line in said(both)] == ["final"]  # no warning: every named op was replaced
    assert len(json.loads((tmp_path / "d.json").read_text())["steps"]) == 5
    extra = opbisect("run", "--patch", "pooled,elsewhere/pooled", script)
    assert extra.returncode == 0 and len(said(extra)) == 2 and "elsewhere/pooled" in said(extra)[0]


def test_run_at_a_later_step_counts_and_digests_from_it_and_takes_a_patch_made_for_it(tmp_path):
    """`fix --at step:train_b` makes a patch of train_b's ops, which train_a (called first) lacks: with the same
    `--at`, run takes it, and its --steps and --digests start at train_b's first call, as fix's user's test needs."""
    script = write_script(tmp_path, "two_steps", TWO_STEPS)
    first = opbisect("run", "--steps", "1", "--digests", tmp_path / "a.json", script)
    later = opbisect("run", "--at", "step:train_b", "--steps", "2", "--digests", tmp_path / "b.json", script)
    assert first.returncode == later.returncode == 0, later.stderr[-2000:]
    at_a, after_a = json.loads((tmp_path / "a.json").read_text())["steps"]  # each digests the variables it trains
    written = json.loads((tmp_path / "b.json").read_text())  # at train_b's call, after it, after train_a's 2nd
    steps = written["steps"]
    assert written["calls"] == ["step:train_b", "step:train_b", "step:train_a"]  # what fix's next `--at` reads
    assert [sorted(step) for step in steps] == [["b"], ["b"], ["a"]] and [sorted(at_a), sorted(after_a)] == [["a"]] * 2
    assert steps[0]["b"] != steps[1]["b"] and steps[2]["a"] not in (at_a["a"], after_a["a"])
    assert opbisect("run", "--patch", "pooled", "--at", "step:train_b", script).returncode == 0
    assert opbisect("run", "--at", "fit:x", script).returncode == 128


FIT_AGAIN = """
import keras

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
model.compile(optimizer="sgd", loss="mse")
x, y = np.ones((16, 3), "float32"), np.zeros((16, 2), "float32")
for epoch in range(3):
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)  # two steps a call, one train function for all
model.compile(optimizer="sgd", loss="mse")  # a second training call's own train function
for i in range(2):
    model.train_on_batch(x[:8], y[:8])
"""


@pytest.mark.parametrize("line", ["keras", "tf_keras"])
def test_run_counts_each_step_once_however_often_fit_is_called(tmp_path, line):
    """fit called in a loop returns the train function it made before: it was counted again at every call (3 calls
    of fit: 22 digests for 8 steps), so --steps stopped early and fix's user's test compared fewer steps."""
    script = write_script(tmp_path, "fit_again", FIT_AGAIN.replace("import keras", f"import {line} as keras"))
    done = opbisect("run", "--digests", tmp_path / "d.json", script)
    assert done.returncode == 0, done.stderr[-2000:]
    written = json.loads((tmp_path / "d.json").read_text())
    assert len(written["steps"]) == 9 and written["calls"] == ["fit:1"] * 7 + ["fit:4"] * 2


HID_AT_FIRST = """
calls = [0]
VARY = set(range(1, 6)) | set(range(30, 10**6))  # the plain pass's five calls vary, then only from call 30 on


def noisy(x):
    calls[0] += 1
    return (x + np.float32(calls[0] if calls[0] in VARY else 0) * np.float32(1e-3)).astype(np.float32)


w = tf.Variable(tf.ones([4]), name="w")


@tf.function
def step(x):
    w.assign_add(tf.ensure_shape(tf.numpy_function(noisy, [x], tf.float32, name="first"), [4]))
    return tf.reduce_sum(w)


inputs = (tf.ones([4]),)
"""


def test_a_step_that_varies_while_no_op_is_named_looks_harder_and_says_so(tmp_path, run_step):
    """The plain runs vary, capture's first runs happen not to (an observer effect the counts support): no op is
    named. Looking harder (--max-runs) runs every pass again, names the op, and the record says why it looked."""
    t = run_step(HID_AT_FIRST, name="hid", runs=5, max_runs=20, replay=False)
    assert t.record.meta.looked_harder == "the step varied but no op was named"
    assert t.record.meta.runs == 20 and t.sources == ["first"] and t.code == 1


def _kept_fix(folder, env: dict, seed: str = "", tensorflow: str = "2.21.0", device: str = ""):
    """A fix's folder as `opbisect fix` leaves it: patch.csv, and fix.json whose recommendation applies it (a fix
    from before fix.json named the device: none)."""
    folder.mkdir(parents=True)
    (folder / "patch.csv").write_text("round,op_name,op_type,kind\n1,mul,Mul,op\n")  # TRAINS' w * x
    rec = {"variant": "patched", "patch": str(folder / "patch.csv"), "seed": seed, "env": env, "ratio": 1.02,
           "unlike_plain": False, "at": ""}
    (folder / "fix.json").write_text(json.dumps({"script": "train.py", "script_args": ["--epochs", "2"],
                                                 "recommendation": rec,
                                                 "checked_on": {"tensorflow": tensorflow, "device": device}}))
    return folder / "patch.csv"


def test_run_of_a_fixs_patch_warns_where_what_its_users_test_had_is_missing(tmp_path, monkeypatch):
    """A fix kept for months is run from a shell's history: run says what the fix's agreeing runs had that this
    one lacks (its environment, XLA's flags each, its seed, its TensorFlow), and is silent where all of it holds."""
    from opbisect import patched_run, tfcompat

    flags = "--xla_gpu_experimental_enable_fusion_autotuner=false --xla_gpu_enable_triton_gemm=false"
    csv = _kept_fix(tmp_path / "train-fix", {"XLA_FLAGS": flags, "PYTHONHASHSEED": "7"}, seed="7")
    monkeypatch.setattr(tfcompat, "installed_tensorflow", lambda: "2.21.0")
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_enable_triton_gemm=false")  # one of the two flags
    said = patched_run.fix_conditions(str(csv.parent), seed="")
    assert len(said) == 1 and f"agree with PYTHONHASHSEED=7, XLA_FLAGS={flags}, --seed 7 as well" in said[0]
    assert "opbisect run --patch" in said[0] and "--seed 7 train.py -- --epochs 2" in said[0]
    monkeypatch.setenv("XLA_FLAGS", f"--xla_dump_to=/tmp/d {flags}")  # the user's own flags beside the fix's
    monkeypatch.setenv("PYTHONHASHSEED", "7")
    assert patched_run.fix_conditions(str(csv), seed="7") == []
    monkeypatch.setattr(tfcompat, "installed_tensorflow", lambda: "2.22.0")
    said = patched_run.fix_conditions(str(csv), seed="7")
    assert len(said) == 1 and "checked under TensorFlow 2.21.0, and this is 2.22.0" in said[0]
    assert patched_run.fix_conditions("Mul,gradient_tape/x", seed="") == []  # op names: no fix behind them


def test_run_of_a_fixs_patch_warns_on_another_device_than_the_one_it_was_checked_on(tmp_path):
    """A GPU's sources are its kernels' choices: a fix checked on one card and run on another, or on a CPU, is said
    to be unchecked there, with the command that checks it; silent on its own device and for older fixes."""
    from opbisect import patched_run

    csv = _kept_fix(tmp_path / "train-fix", {}, device="GPU (NVIDIA H200)")
    said = patched_run.device_conditions(str(csv), "GPU (NVIDIA H100 80GB HBM3)")
    assert len(said) == 1 and "checked on GPU (NVIDIA H200), and this is GPU (NVIDIA H100 80GB HBM3)" in said[0]
    assert f"opbisect verify --patch {csv} SCRIPT" in said[0]
    assert patched_run.device_conditions(str(csv), "GPU (NVIDIA H200)") == []
    older = _kept_fix(tmp_path / "older-fix", {})  # its fix.json names no device
    assert patched_run.device_conditions(str(older), "CPU") == []
    assert patched_run.device_conditions("Mul", "CPU") == []  # op names: no fix behind them


def test_run_says_what_the_fix_had_before_the_script_runs(tmp_path):
    csv = _kept_fix(tmp_path / "train-fix", {"TF_CUDNN_DETERMINISTIC": "1"}, device="GPU (NVIDIA A100-SXM4-80GB)")
    script = write_script(tmp_path, "trains", SETUP + TRAINS)
    done = opbisect("run", "--patch", csv, script, env={"TF_CUDNN_DETERMINISTIC": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    assert said(done)[0].startswith(f"opbisect: warning: the fix that made {csv} had two fresh runs agree with "
                                    "TF_CUDNN_DETERMINISTIC=1 as well")
    # the device, said as the script imports TensorFlow
    assert said(done)[1].startswith(f"opbisect: warning: the fix that made {csv} was checked on GPU (NVIDIA "
                                    "A100-SXM4-80GB), and this is ")
    assert said(done)[-1].startswith("opbisect: final weights")
    assert done.stdout.startswith("setup ran")  # said before the script's own output
