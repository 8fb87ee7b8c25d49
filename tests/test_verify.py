"""From suspect to fix: the patched step replaces exactly the named ops (inside loops and branches too), `opbisect
verify` measures it beside the plain step and the switches, and `opbisect.deterministic` applies it in training.

A planted culprit (an unseeded random op, given a test-only patch that returns a constant) varies in every run
whatever the machine's load, so the rewrite and the exit codes are tested without a live race; the CPU scatter
race of the shipped example is checked too: its patched step must be reproducible whether or not the race fires.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf

import opbisect
from opbisect.errors import LacksPatchedOps
from opbisect.patches import PATCHES, Patch
from opbisect.record.verification import CPU_REFERENCE, GLOBAL, PATCHED, PLAIN
from opbisect.settings import VerifySettings
from opbisect.verify import run_verify

from conftest import EXAMPLES, NOISE_STEP, ROOT, cli, trace, write_script

NOISE_IN_COND_IN_WHILE = """
v = tf.Variable(tf.zeros([4]), name="v")


@tf.function
def step(x):
    def body(i, s):
        v.assign_add(x)
        r = tf.cond(i > 1, lambda: v.read_value() * tf.random.uniform([4], name="noise"), lambda: v.read_value())
        return i + 1, s + tf.reduce_sum(r)
    _, total = tf.while_loop(lambda i, s: i < 4, body, (tf.constant(0), tf.constant(0.0)))
    return total


inputs = (tf.ones([4]),)
"""


@pytest.fixture
def constant_random(monkeypatch):
    """A test-only patch: RandomUniform gives 0.5 everywhere (the planted culprit, made deterministic)."""
    def build(ctx, shape):
        return [tf.fill(shape, tf.constant(0.5, ctx.attrs["dtype"]))]

    monkeypatch.setitem(PATCHES, "RandomUniform", Patch("RandomUniform", build, "a constant (test only)"))


def verify(script, tmp_path, **settings):
    lines: list[str] = []
    settings.setdefault("runs", 3)
    code = run_verify(VerifySettings(script=script, out=tmp_path / "reports", **settings), echo=lines.append)
    folder = tmp_path / "reports" / f"{script.stem}-verify"
    record = json.loads((folder / "verification.json").read_text())
    return code, pd.read_csv(folder / "variants.csv").set_index("variant"), record


def test_a_planted_culprit_inside_a_cond_inside_a_while_is_replaced_there_and_verify_exits_0(
        tmp_path, constant_random):
    script = write_script(tmp_path, "model_step", NOISE_IN_COND_IN_WHILE)
    code, variants, record = verify(script, tmp_path, patch="RandomUniform", switches=False)
    assert code == 0
    assert record["replaced"] == ["while/body::while/cond/then_branch::while/cond/noise/RandomUniform"]
    assert variants.loc[PLAIN, "distinct"] == 3 and not variants.loc[PLAIN, "reproducible"]
    assert variants.loc[PATCHED, "distinct"] == 1 and variants.loc[PATCHED, "reproducible"]
    assert record["recommendation"] == PATCHED


def test_verify_says_each_variant_on_stderr_as_it_finishes_and_not_with_no_progress(tmp_path, constant_random,
                                                                                    capsys):
    script = write_script(tmp_path, "model_step", NOISE_IN_COND_IN_WHILE)
    _, variants, _ = verify(script, tmp_path, patch="RandomUniform", switches=False)
    said = capsys.readouterr()
    first, *lines = [ln for ln in said.err.splitlines() if ln.startswith("verify: ")]
    assert f"{variants.loc[PLAIN, 'runs']} runs each" in first  # said before they run
    assert [ln.split(": ")[1] for ln in lines] == list(variants.index)  # each variant once, in the record's order
    for line, (_, row) in zip(lines, variants.iterrows()):
        same = "bitwise reproducible" if row["reproducible"] else f"{row['distinct']} distinct results"
        assert f"{same} in {row['runs']} runs" in line
    assert "verify: " not in said.out  # stdout keeps the answer alone
    verify(script, tmp_path, patch="RandomUniform", switches=False, progress=False)
    assert "verify: " not in capsys.readouterr().err


def test_the_patched_step_computes_what_its_patch_says_in_the_body(tmp_path, constant_random):
    script = write_script(tmp_path, "model_step", NOISE_IN_COND_IN_WHILE)
    from opbisect.targets.loader import importable, load_target

    with importable(script):
        target = load_target(script)
        step = opbisect.deterministic(target.step, "RandomUniform")
        total = float(step(*target.make_inputs()))
    # v after iterations 0..3: 1, 2, 3, 4; iterations 2 and 3 take the noisy branch, now 0.5 * v
    assert total == 4 * (1 + 2) + 4 * 0.5 * (3 + 4)


HIDDEN_BEHIND = """
w = tf.Variable(tf.ones([4]), name="w")


def jitter(x):  # varies in every run
    return (x + np.random.random(x.shape)).astype(np.float32)


@tf.function
def step(x):
    noisy = tf.numpy_function(jitter, [x], tf.float32, name="first")
    # a source too, but hidden while its input already varies
    w.assign_add(tf.numpy_function(jitter, [noisy], tf.float32, name="second"))
    return tf.reduce_sum(w)


inputs = (tf.ones([4]),)
"""


def _looks_behind(t) -> str:
    """The --patch of the trace command a report's note gives to look behind its sources ("" without one)."""
    found = [re.search(r"--patch (\S+)`", f.message) for f in t.record.findings]
    return next((f"--patch {m.group(1)}" for m in found if m), "")


def test_trace_with_patch_finds_the_source_the_patched_one_hid(tmp_path, monkeypatch):
    def build(ctx, x):  # a test-only patch: the numpy_function gives its input back
        return [tf.identity(x)]

    monkeypatch.setitem(PATCHES, "PyFunc", Patch("PyFunc", build, "identity (test only)"))
    script = write_script(tmp_path, "model_step", HIDDEN_BEHIND)
    first = trace(script, tmp_path / "first", runs=3, replay=False)
    assert first.sources == ["first"]
    assert _looks_behind(first) == f"--patch {first.csv_path}"  # the trace says what to run next
    second = trace(script, tmp_path / "second", runs=3, replay=False, patch=str(first.csv_path))
    assert second.code == 1 and second.sources == ["second"]
    assert second.record.meta.patched == ["first"]
    assert _looks_behind(second) == f"--patch {first.csv_path},{second.csv_path}"
    assert second.row("second")["source_location"].startswith("model_step.py:")  # sites kept from the step
    code, variants, record = verify(script, tmp_path, patch=str(first.csv_path), switches=False)
    assert code == 1 and record["replaced"] == ["first"]
    code, variants, record = verify(script, tmp_path, patch=f"{first.csv_path},{second.csv_path}", switches=False)
    assert code == 0 and record["replaced"] == ["first", "second"]


JITTER = """
w = tf.Variable(tf.ones([4]), name="w")


def jitter(x):  # a fresh draw in every run: the source the patch replaces
    return (x + np.random.random(x.shape)).astype(np.float32)


@tf.function
def step(x):
    w.assign_add(tf.ensure_shape(tf.numpy_function(jitter, [x], tf.float32, name="jitter"), [4]))
    return tf.reduce_sum(w)


inputs = (tf.ones([4]),)
"""


def test_a_variant_alike_in_its_first_runs_runs_on_and_a_rarer_difference_refutes_it(tmp_path, monkeypatch):
    """On an H200 BERT-base's patched step gave one result in 10 runs, and under XLA's fusion switch 2 of 100 differed:
    a patch planted to slip once, at its tenth call (its first is verify's warm-up), passes 3 runs and fails
    --confirm-runs 20."""
    calls = [0]

    def slip(x):
        calls[0] += 1
        return (x + np.float32(1e-3 if calls[0] == 10 else 0.0)).astype(np.float32)

    def build(ctx, x):
        return [tf.ensure_shape(tf.numpy_function(slip, [x], tf.float32), [4])]

    monkeypatch.setitem(PATCHES, "PyFunc", Patch("PyFunc", build, "test only: slips once"))
    script = write_script(tmp_path, "model_step", JITTER)
    code, variants, record = verify(script, tmp_path, patch="jitter", switches=False, confirm_runs=0,
                                    timing_runs=0)
    assert code == 0 and variants.loc[PATCHED, "runs"] == 3 and record["confirm_runs"] == 0
    calls[0] = 0
    code, variants, record = verify(script, tmp_path, patch="jitter", switches=False, confirm_runs=20,
                                    timing_runs=0)
    assert code == 1 and record["confirm_runs"] == 20
    assert variants.loc[PATCHED, "runs"] == 20 and variants.loc[PATCHED, "distinct"] == 2
    assert variants.loc[PLAIN, "runs"] == 3  # seen to vary in its first runs: not run on


FROM_STEP_3 = """
w = tf.Variable(tf.ones([4]), name="w")


def jitter(x, on):  # varies in every run, from the step whose batch switches it on
    return (x + on * np.random.random(x.shape)).astype(np.float32)


def batches():
    for k in range(4):
        yield tf.ones([4]) * (k + 1), tf.constant(float(k >= 2))


@tf.function
def step(x, on):
    w.assign_add(tf.numpy_function(jitter, [x, on], tf.float32, name="jitter"))
    return tf.reduce_sum(w)


inputs = next(batches())
"""


def test_verify_runs_through_the_step_where_the_csvs_sources_first_differed(tmp_path, monkeypatch):
    """fit_epochs: the race fires on the second batch only, so a verify of the first step alone saw the plain step
    reproducible and proved nothing."""
    monkeypatch.setitem(PATCHES, "PyFunc", Patch("PyFunc", lambda ctx, x, on: [tf.identity(x)], "test only"))
    script = write_script(tmp_path, "model_step", FROM_STEP_3)
    first = trace(script, tmp_path / "first", steps=4, runs=3, replay=False)
    assert first.sources == ["jitter"] and first.row("jitter")["first_step"] == 3
    code, variants, record = verify(script, tmp_path, patch=str(first.csv_path), switches=False)
    assert code == 0 and record["steps"] == 3
    assert variants.loc[PLAIN, "distinct"] == 3 and variants.loc[PATCHED, "reproducible"]
    code, variants, record = verify(script, tmp_path, patch=str(first.csv_path), switches=False, steps=1)
    assert record["steps"] == 1 and variants.loc[PLAIN, "reproducible"]  # step 1 alone never varies


def test_trace_with_patch_enters_a_patched_body_and_finds_nothing_left(tmp_path, constant_random):
    script = write_script(tmp_path, "model_step", NOISE_IN_COND_IN_WHILE)
    t = trace(script, tmp_path / "reports", runs=3, replay=False, patch="RandomUniform")
    body = "while/body::while/cond/then_branch::"
    assert t.code == 0 and t.sources == []
    assert t.record.meta.patched == [f"{body}while/cond/noise/RandomUniform"]
    regions = {n["id"].rsplit("::", 1)[0] for n in t.record.graph["nodes"] if "::" in n["id"]}
    # both branches entered, under the step's own op names (a second report's CSV names what the first did)
    assert regions == {"while/body", "while/body::while/cond/then_branch", "while/body::while/cond/else_branch"}


NOISE_AND_BIAS_STEP = NOISE_STEP.replace(
    '    w.assign_sub(0.1 * tf.random.uniform([4], name="noise") * x)',
    '    with tf.GradientTape() as tape:\n'
    '        loss = tf.reduce_sum(tf.nn.bias_add(tf.reshape(x, [1, 4]), w))\n'
    '    w.assign_sub(0.1 * tf.random.uniform([4], name="noise") * tape.gradient(loss, w))')


def test_verify_exits_1_when_the_patch_misses_the_source_and_reports_the_global_switch(tmp_path):
    script = write_script(tmp_path, "model_step", NOISE_AND_BIAS_STEP)  # a BiasAddGrad, and the unseeded source
    done = cli("verify", str(script), "--patch", "BiasAddGrad", "--runs", "3", "--timing-runs", "6", "--out",
               str(tmp_path / "r"))
    assert done.returncode == 1, done.stderr[-3000:]
    variants = pd.read_csv(tmp_path / "r" / "model_step-verify" / "variants.csv").set_index("variant")
    assert not variants.loc[PATCHED, "reproducible"]
    assert GLOBAL in variants.index  # measured in its own process, whatever it found
    # each variant's cost: the median of 6 steps timed after its 3 runs, with an interval (the global switch
    # raises on the unseeded random op: no time)
    assert variants.loc[PLAIN, "timed"] == variants.loc[PATCHED, "timed"] == 6
    assert variants.loc[GLOBAL, "timed"] == 0 and "seed" in variants.loc[GLOBAL, "error"]
    low, ratio, high = variants.loc[PATCHED, ["ratio_low", "ratio", "ratio_high"]]
    assert 0 < low <= high and low - 0.01 <= ratio <= high + 0.01


def test_a_ratio_s_interval_holds_what_the_samples_support():
    from opbisect.execute.variants import ratio_interval

    rng = np.random.default_rng(3)
    base = list(1.0 + rng.exponential(0.05, 30))  # a step's times: a floor and a tail
    low, high = ratio_interval(list(1.0 + rng.exponential(0.05, 30)), base)
    assert low < 1.0 < high  # the same step: no difference claimed
    low, high = ratio_interval([t * 1.5 for t in base], base)
    assert 1.3 < low <= 1.5 <= high < 1.7  # half again as slow, and said so
    assert ratio_interval(base[:4], base) is None  # too few steps for an interval
    assert ratio_interval(base, base[:10]) == ratio_interval(base, base[:10])  # the same samples, the same interval


def test_verify_refuses_ops_the_step_does_not_have(tmp_path):
    script = write_script(tmp_path, "model_step", NOISE_STEP)
    done = cli("verify", str(script), "--patch", "no/such/op", "--out", str(tmp_path / "r"))
    assert done.returncode == 128, done.stderr[-3000:]
    assert not (tmp_path / "r" / "model_step-verify").exists()
    done = cli("verify", str(script), "--out", str(tmp_path / "r"))
    assert done.returncode == 128


KERAS_FIT = """
import keras

JIT = {jit}


def make(steps_per_execution=1):
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((16,), dtype="int32"), keras.layers.Embedding(100, 8),
                          keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(4)])
    m.compile(optimizer=keras.optimizers.SGD(0.1),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=JIT,
              steps_per_execution=steps_per_execution)
    return m


rng = np.random.default_rng(0)
x = rng.integers(0, 16, (1000, 16)).astype("int32")  # a partial last batch at 128
y = rng.integers(0, 4, (1000,)).astype("int32")
"""


@pytest.mark.parametrize("jit", [False, True])
def test_deterministic_on_a_keras_model_patches_fit_in_every_form(tmp_path, jit):
    import importlib.util

    script = write_script(tmp_path, f"keras_fit_{jit}", KERAS_FIT.replace("{jit}", str(jit)))
    spec = importlib.util.spec_from_file_location(script.stem, script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    plain = mod.make()
    plain.fit(mod.x, mod.y, batch_size=128, shuffle=False, verbose=0)
    fixed = mod.make(steps_per_execution=2)
    assert opbisect.deterministic(fixed, ["ResourceScatterSub", "SparseSoftmaxCrossEntropyWithLogits"]) is fixed
    fixed.fit(mod.x, mod.y, batch_size=128, shuffle=False, verbose=0)
    assert sorted(tf_type.split("/")[-1] for tf_type in fixed.opbisect_patched.replaced) == [
        "ResourceScatterSub", "SparseSoftmaxCrossEntropyWithLogits"]
    for a, b in zip(plain.get_weights(), fixed.get_weights()):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)


def _keras_line(name: str):
    import importlib

    return importlib.import_module(name)


def _two_phases(keras, patch: str | None):
    """Transfer learning as the tutorials write it: the base frozen, fit; thawed, compiled again with another
    optimizer, fit again. The model, its embedding after the first phase, and the ops each phase replaced."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    base = keras.Sequential([keras.layers.Embedding(100, 8), keras.layers.GlobalAveragePooling1D()])
    model = keras.Sequential([base, keras.layers.Dense(4)])
    x, y = rng.integers(0, 100, (256, 16)).astype("int32"), rng.integers(0, 4, (256,)).astype("int32")
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    replaced, frozen = [], []
    base.trainable = False
    for optimizer in (keras.optimizers.SGD(0.1), keras.optimizers.Adam(0.05)):
        model.compile(optimizer=optimizer, loss=loss)
        if patch and not hasattr(model, "opbisect_patched"):
            opbisect.deterministic(model, patch)
        model.fit(x, y, batch_size=64, shuffle=False, verbose=0)
        replaced.append(list(model.opbisect_patched.replaced) if patch else [])
        frozen.append(base.get_weights()[0].copy())
        base.trainable = True
    return model, frozen[0], replaced


@pytest.mark.parametrize("line", ["keras", "tf_keras"])
def test_a_model_compiled_again_is_patched_again_so_it_trains_what_keras_would(line):
    """compile() again (layers thawed, another optimizer): Keras traces its train step again, and so must the patch;
    a patched step kept from the first compile would leave the thawed embedding untrained, with the former SGD."""
    keras = _keras_line(line)
    plain, frozen, _ = _two_phases(keras, None)
    fixed, _, replaced = _two_phases(keras, "BiasAddGrad")
    assert [len(ops) for ops in replaced] == [1, 1]  # the Dense layer's bias gradient, in each phase's step
    assert np.abs(plain.layers[0].get_weights()[0] - frozen).max() > 1e-3  # the second phase trains the embedding
    for a, b in zip(plain.get_weights(), fixed.get_weights()):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
    assert len(fixed.optimizer.variables) == len(plain.optimizer.variables)  # Adam's slots, not SGD's


def _embedding_sgd(keras, patch: str):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.layers.Embedding(50, 4), keras.layers.GlobalAveragePooling1D()])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    opbisect.deterministic(model, patch)
    model.fit(np.arange(32).reshape(8, 4) % 50, np.zeros((8, 4), "float32"), verbose=0)
    return model


@pytest.mark.parametrize("line", ["keras", "tf_keras"])
def test_a_step_compiled_again_without_an_op_the_patch_names_is_trained_and_warns(line):
    """The patch names SGD's sparse update by op id; compiled again with Adam, the step has no such op: the training
    goes on (with Adam, as Keras would), and a warning names what the patch was made for."""
    keras = _keras_line(line)
    sgd = _embedding_sgd(keras, "ResourceScatterSub,ResourceScatterAdd").opbisect_patched.replaced
    model = _embedding_sgd(keras, ",".join(sgd))  # by op id: another model's, matched across renumbered scopes
    assert len(sgd) == 1 and len(model.opbisect_patched.replaced) == 1
    model.compile(optimizer=keras.optimizers.Adam(0.1), loss="mse")
    with pytest.warns(LacksPatchedOps):
        model.fit(np.arange(32).reshape(8, 4) % 50, np.zeros((8, 4), "float32"), verbose=0)
    assert model.opbisect_patched.replaced == [] and model.opbisect_patched.lacking == set(sgd)
    assert int(model.optimizer.iterations.numpy()) == 1  # Adam's first step: trained, not refused


@pytest.mark.parametrize("line", ["keras", "tf_keras"])
def test_a_patched_model_saved_and_loaded_resumes_to_the_same_bits(tmp_path, line):
    """A month of training is checkpointed: the patched model saves as any model does, and one loaded back and
    patched again takes the next step to the bits the uninterrupted model reaches."""
    keras = _keras_line(line)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    opbisect.deterministic(model, "BiasAddGrad")
    x, y = np.random.default_rng(0).standard_normal((2, 16, 3), dtype="float32")[0], np.ones((16, 2), "float32")
    model.fit(x, y, batch_size=8, shuffle=False, verbose=0)
    model.save(tmp_path / "m.keras")
    tf.saved_model.save(model, str(tmp_path / "saved"))
    loaded = opbisect.deterministic(keras.models.load_model(tmp_path / "m.keras"), "BiasAddGrad")
    for resumed in (model, loaded):
        resumed.fit(x, y, batch_size=8, shuffle=False, verbose=0)
    assert len(loaded.opbisect_patched.replaced) == 2
    for a, b in zip(model.get_weights() + model.optimizer.variables, loaded.get_weights() + loaded.optimizer.variables):
        np.testing.assert_array_equal(np.asarray(b), np.asarray(a))


def test_sources_that_are_not_an_ops_own_variation_are_listed_not_patched(tmp_path, noise_traced):
    first, script = noise_traced, noise_traced.script
    assert list(first.csv["kind"]) == ["random"]
    code, variants, record = verify(script, tmp_path, patch=str(first.csv_path), switches=False)
    assert code == 1 and record["replaced"] == []
    assert record["not_ops"] == {"noise/RandomUniform": "random"}


def test_the_exit_code_and_the_recommendation_are_decided_from_the_variants():
    from opbisect.record.verification import Variant, Verification, decide

    def v(name, distinct, ms, error=""):
        return Variant(name=name, how="", runs=5, distinct=distinct, step_ms=ms, error=error)

    variants = [v(PLAIN, 5, 1.0), v(PATCHED, 3, 0.9), v(GLOBAL, 1, 9.0), v("TF_CUDNN_DETERMINISTIC=1", 4, 1.1),
                v(f"{PATCHED} + TF_CUDNN_DETERMINISTIC=1", 1, 1.2)]
    made = Verification(script="s.py", script_path="/s.py", device="GPU", patch="x.csv", runs=5, replaced=[],
                        skipped={}, renamed={}, not_ops={}, plain_spread=0.0, variants=variants,
                        recommendation=decide(variants))
    assert made.recommendation == f"{PATCHED} + TF_CUDNN_DETERMINISTIC=1" and made.exit_code == 0
    cheaper = Variant(name=CPU_REFERENCE, how="", runs=5, distinct=1, step_ms=0.1, reference=True)
    assert decide(variants + [cheaper]) == made.recommendation  # a yardstick, never the remedy
    variants[-1] = v(f"{PATCHED} + TF_CUDNN_DETERMINISTIC=1", 2, 1.2)
    variants[2] = v(GLOBAL, 0, None, error="UnimplementedError: no deterministic kernel")
    assert decide(variants) == "" and not Verification(**{**made.__dict__, "variants": variants}).fixed_by


def test_a_variant_reproducible_only_while_its_convolutions_are_autotuned_is_recommended_last():
    """ResNet50 and the conv net on the H200: the patched step under TF_CUDNN_DETERMINISTIC gave the same bits in
    its process, but TensorFlow still picks the fastest deterministic cuDNN algorithm by timing in each process;
    only op determinism (the global switch) takes the first that works."""
    from opbisect.record.verification import Variant, Verification, decide
    from opbisect.report.verify_view import frame

    def v(name, distinct, ms, autotuned=True):
        return Variant(name=name, how="", runs=5, distinct=distinct, step_ms=ms, autotuned=autotuned)

    cudnn = f"{PATCHED} + TF_CUDNN_DETERMINISTIC=1"
    variants = [v(PLAIN, 5, 1.0), v(PATCHED, 3, 0.9), v(GLOBAL, 1, 1.3, autotuned=False), v(cudnn, 1, 0.95)]
    made = Verification(script="s.py", script_path="/s.py", device="GPU", patch="x.csv", runs=5, replaced=[],
                        skipped={}, renamed={}, not_ops={}, plain_spread=0.0, variants=variants,
                        recommendation=decide(variants))
    assert made.recommendation == GLOBAL and made.in_one_process == [cudnn]
    assert made.fixed_by == cudnn and made.exit_code == 0  # the exit code is still the patched step's
    assert list(frame(made)["autotuned"]) == [True, True, False, True]
    variants[2] = v(GLOBAL, 0, None, autotuned=False)  # the switch raised: the autotuned one is all there is
    variants[2].error = "UnimplementedError"
    assert decide(variants) == cudnn


@pytest.mark.parametrize("plain, patched, named", [(1, 1, PLAIN), (3, 1, PATCHED), (3, 2, "")])
def test_the_summary_gives_one_recommendation_the_records(plain, patched, named):
    from opbisect.record.verification import Variant, Verification, decide
    from opbisect.report.verify_view import lines

    variants = [Variant(name=PLAIN, how="", runs=3, distinct=plain, step_ms=1.0),
                Variant(name=PATCHED, how="", runs=3, distinct=patched, step_ms=1.1)]
    made = Verification(script="s.py", script_path="/s.py", device="GPU", patch="x.csv", runs=3, replaced=[],
                        skipped={}, renamed={}, not_ops={}, plain_spread=0.0, variants=variants,
                        recommendation=decide(variants))
    said = [line.split(":")[1].split(" (")[0].strip() for line in lines(made) if line.startswith("recommendation:")]
    assert made.recommendation == named and said == [named or "none"]


def test_only_a_gpu_step_with_convolutions_and_autotuning_on_is_autotuned(monkeypatch):
    from types import SimpleNamespace

    from opbisect.execute.preflight import autotuned_convolutions
    from opbisect.ir.graph import OpGraph

    def step(kind, *types):
        graph = OpGraph()
        for k, t in enumerate(types):
            graph.add_op(f"op{k}", type=t)
        return SimpleNamespace(kind=kind, trace=SimpleNamespace(graph=graph))

    def _autotuned(s) -> bool:  # what verify marks each variant but the global switch's with
        return bool(autotuned_convolutions(s.trace.graph, s.kind == "gpu"))

    monkeypatch.delenv("TF_CUDNN_USE_AUTOTUNE", raising=False)
    assert _autotuned(step("gpu", "MatMul", "Conv2DBackpropFilter"))
    assert not _autotuned(step("gpu", "MatMul", "BiasAddGrad")) and not _autotuned(step("cpu", "Conv2D"))
    monkeypatch.setenv("TF_CUDNN_USE_AUTOTUNE", "0")
    assert not _autotuned(step("gpu", "Conv2D"))


def test_the_record_says_which_variants_its_timings_cannot_tell_apart_from_the_recommended_one():
    from opbisect.record.verification import Variant, Verification, decide

    def v(name, distinct, ratio, low, high):
        return Variant(name=name, how="", runs=5, distinct=distinct, step_ms=ratio, ratio=ratio, ratio_low=low,
                       ratio_high=high)

    variants = [v(PLAIN, 5, 1.0, None, None), v(PATCHED, 1, 1.04, 0.98, 1.10), v(GLOBAL, 1, 1.08, 1.02, 1.15),
                v("TF_USE_DETERMINISTIC_SEGMENT_REDUCTIONS=1", 1, 3.0, 2.8, 3.2),
                v("noisy but varies", 3, 1.05, 0.9, 1.2)]
    made = Verification(script="s.py", script_path="/s.py", device="GPU", patch="x.csv", runs=5, replaced=[],
                        skipped={}, renamed={}, not_ops={}, plain_spread=0.0, variants=variants,
                        recommendation=decide(variants))
    assert made.recommendation == PATCHED and made.untold == [GLOBAL]  # not the slower one, nor one that varies
    made.variants[2] = v(GLOBAL, 1, 1.30, 1.2, 1.4)
    assert made.untold == []


XLA_LOOP = """
table = tf.Variable(tf.zeros([8, 4]), name="table")


@tf.function(jit_compile=True)
def step(ids, rows):
    def body(i, total):
        table.scatter_add(tf.IndexedSlices(rows * tf.cast(i + 1, tf.float32), ids))
        return i + 1, total + tf.math.unsorted_segment_sum(rows, ids, 8)
    _, total = tf.while_loop(lambda i, t: i < 3, body, (tf.constant(0), tf.zeros([8, 4])))
    return total


inputs = (tf.constant(np.arange(600) % 5, tf.int32), tf.constant(np.random.default_rng(0).normal(size=(600, 4)),
                                                                  tf.float32))
"""


def test_deterministic_patches_an_xla_loop_body_and_keeps_its_numbers(tmp_path):
    from opbisect.targets.loader import importable, load_target

    script = write_script(tmp_path, "model_step", XLA_LOOP)
    with importable(script):
        target = load_target(script)
        args = target.make_inputs()
        table = target.module.table
        plain_total = target.step(*args).numpy()
        plain_table = table.numpy()
        table.assign(tf.zeros([8, 4]))
        step = opbisect.deterministic(target.step, "ResourceScatterAdd,UnsortedSegmentSum")
        total = step(*args).numpy()
        assert sorted(step.replaced) == ["while/body::while/ResourceScatterAdd",
                                         "while/body::while/UnsortedSegmentSum"]
        np.testing.assert_allclose(total, plain_total, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(table.numpy(), plain_table, rtol=1e-5, atol=1e-5)


def test_a_patched_loop_body_keeps_its_own_ops_and_runs_the_patch_inlined_not_as_a_call(tmp_path):
    # A loop runs its body's ops one at a time, every iteration: a call of the patch there ran as a function of its
    # own each iteration, and a body traced again would add an Identity per result and a NoOp.
    from opbisect.targets.loader import importable, load_target

    script = write_script(tmp_path, "model_step", XLA_LOOP.replace("jit_compile=True", "jit_compile=False"))
    with importable(script):
        target = load_target(script)
        step = opbisect.deterministic(target.step, "UnsortedSegmentSum")
        step(*target.make_inputs())
        patched_step = next(iter(step.steps.values()))
        library = {f.signature.name: f for f in patched_step.trace.graph_def.library.function}
        original = library[patched_step.trace.regions["while/body"].function]
        patched = patched_step.rewrite.bodies
    assert len(patched) == 1
    before = {n.name: n.op for n in original.node_def}
    after = {n.name: n.op for n in patched[0].node_def}
    assert {name: after[name] for name in before} == {**before, "while/UnsortedSegmentSum": "IdentityN"}
    added = {name: op for name, op in after.items() if name not in before}
    assert added and all(name.startswith("while/UnsortedSegmentSum/opbisect_patch/") for name in added)
    assert "UnsortedSegmentSum" in added.values()  # the patch's own, on the CPU: its order is fixed there
    assert not {"PartitionedCall", "StatefulPartitionedCall"} & set(added.values())


XENT_LOOP = """
w = tf.Variable(tf.random.stateless_normal([16, 10], seed=[1, 2]), name="w")


@tf.function
def step(x, y):
    def body(i, total):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(y, tf.matmul(x, w)))
        w.assign_sub(0.1 * tape.gradient(loss, w))
        return i + 1, total + loss
    _, total = tf.while_loop(lambda i, t: i < 3, body, (tf.constant(0), tf.constant(0.0)))
    return total


inputs = (tf.constant(np.random.default_rng(0).normal(size=(64, 16)), tf.float32),
          tf.constant(np.arange(64) % 10, tf.int32))
"""


def test_a_patched_op_with_two_named_outputs_feeds_each_consumer_its_own_output(tmp_path):
    # Sparse cross-entropy's outputs are `loss` and `backprop`: in the body's FunctionDef their consumers name them
    # so, and the call that replaces the op names them output:0 and output:1.
    from opbisect.targets.loader import importable, load_target

    script = write_script(tmp_path, "model_step", XENT_LOOP)
    with importable(script):
        target = load_target(script)
        args, w = target.make_inputs(), target.module.w
        start = w.numpy()
        plain_total, plain_w = target.step(*args).numpy(), w.numpy()
        w.assign(start)
        step = opbisect.deterministic(target.step, "SparseSoftmaxCrossEntropyWithLogits")
        total = step(*args).numpy()
        assert len(step.replaced) == 1 and len(step.steps[next(iter(step.steps))].rewrite.bodies) == 1
        np.testing.assert_allclose(total, plain_total, rtol=1e-5)
        np.testing.assert_allclose(w.numpy(), plain_w, rtol=1e-5, atol=1e-6)


NESTED_CALL_IN_LOOP = """
table = tf.Variable(tf.zeros([8, 4]), name="table")


@tf.function
def accumulate(ids, rows):
    table.scatter_add(tf.IndexedSlices(rows, ids))
    return tf.math.unsorted_segment_sum(rows, ids, 8)


@tf.function
def step(ids, rows):
    def body(i, total):
        return i + 1, total + accumulate(ids, rows * tf.cast(i + 1, tf.float32))
    _, total = tf.while_loop(lambda i, t: i < 3, body, (tf.constant(0), tf.zeros([8, 4])))
    return total


inputs = (tf.constant(np.arange(600) % 5, tf.int32), tf.constant(np.random.default_rng(0).normal(size=(600, 4)),
                                                                  tf.float32))
"""


def test_ops_of_a_call_inlined_in_a_loop_body_are_patched_in_the_body_traced_again(tmp_path):
    from opbisect.targets.loader import importable, load_target

    script = write_script(tmp_path, "model_step", NESTED_CALL_IN_LOOP)
    with importable(script):
        target = load_target(script)
        args = target.make_inputs()
        plain_total, plain_table = target.step(*args).numpy(), target.module.table.numpy()
        target.module.table.assign(tf.zeros([8, 4]))
        step = opbisect.deterministic(target.step, "ResourceScatterAdd,UnsortedSegmentSum")
        total = step(*args).numpy()
        patched = step.steps[next(iter(step.steps))]
        assert len(step.replaced) == 2 and all(op.startswith("while/body::") for op in step.replaced)
        assert patched.rewrite.bodies == []  # the ops came from the inlined call: not nodes of the body's FunctionDef
        np.testing.assert_allclose(total, plain_total, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(target.module.table.numpy(), plain_table, rtol=1e-5, atol=1e-5)


def test_verify_compares_every_variant_with_the_step_on_the_cpu_and_never_recommends_it(tmp_path):
    # From the command line, as a user runs it: the parent is a fresh process like its child, so Keras names the
    # variables alike in both (a parent that imported the example before would have renumbered its scopes, and the
    # child's start could not be matched to it: `comparable` False, as the other child variants would be)
    # The committed CPU report's CSV: a fresh trace here may not see the live race fire on a loaded machine, while
    # the patched step must give one result whether or not the race fires. On the CPU, where the report was made,
    # on any machine (a GPU has sources of its own the CSV does not name): in a child, since the process that hides
    # the GPU must not have started TensorFlow on it.
    script = EXAMPLES / "embedding_sgd.py"
    csv = ROOT / "reports" / "cpu" / "embedding_sgd" / "sources.csv"
    fixable = [r.op_name for r in pd.read_csv(csv).itertuples() if r.kind in ("op", "write")]
    assert fixable == ["sgd/ResourceScatterSub"]
    done = cli("verify", str(script), "--patch", str(csv), "--no-switches", "--cpu-reference", "on", "--runs", "3",
               "--timing-runs", "6", "--device", "cpu", "--out", str(tmp_path / "r"))
    folder = tmp_path / "r" / "embedding_sgd-verify"
    variants = pd.read_csv(folder / "variants.csv").set_index("variant")
    record = json.loads((folder / "verification.json").read_text())
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(variants.index) == [PLAIN, PATCHED, CPU_REFERENCE]
    assert record["replaced"] == fixable and variants.loc[PATCHED, "distinct"] == 1
    # the same numbers up to summation order: within the plain step's own float noise, and never far
    assert variants.loc[PATCHED, "max_abs_diff"] < 1e-5
    ref = variants.loc[CPU_REFERENCE]
    assert ref["reference"] and ref["comparable"] and ref["error"] != ref["error"]  # NaN: no error
    assert record["recommendation"] != CPU_REFERENCE
    # here the step runs on the CPU too: the reference differs from either only by the race's summation order
    for name in (PLAIN, PATCHED):
        assert 0 <= variants.loc[name, "cpu_abs_diff"] < 1e-5
    assert variants.loc[CPU_REFERENCE, "cpu_abs_diff"] != variants.loc[CPU_REFERENCE, "cpu_abs_diff"]  # not itself
    assert (variants["timed"] == 6).all()  # the child's steps timed after its runs too
    for name in (PATCHED, CPU_REFERENCE):
        low, ratio, high = variants.loc[name, ["ratio_low", "ratio", "ratio_high"]]
        assert 0 < low <= high and low - 0.01 <= ratio <= high + 0.01


def test_an_op_only_a_family_switch_fixes_is_left_as_it_is_and_says_whether_the_switch_is_on(monkeypatch):
    w = tf.Variable(tf.ones([2, 2, 1, 1]), name="w")

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            y = tf.reduce_sum(tf.nn.conv2d(x, w, 1, "VALID"))
        return tape.gradient(y, w)

    x = tf.ones([1, 4, 4, 1])
    for value, on in (("0", False), ("1", True)):
        monkeypatch.setenv("TF_CUDNN_DETERMINISTIC", value)
        fixed = opbisect.deterministic(step, "Conv2DBackpropFilter")
        with pytest.warns(UserWarning):
            got = fixed(x)
        [why] = fixed.skipped.values()
        assert fixed.replaced == [] and ("set in this process" in why) is on
        np.testing.assert_array_equal(got.numpy(), step(x).numpy())


def test_a_step_xla_compiles_on_a_gpu_gets_the_patch_under_xlas_switches_and_fix_keeps_its_flags():
    """BERT-base under mixed precision on an H100: the patched step still varied (2-3 results in 10) in what XLA
    compiled, and capture named nothing more; with XLA's fusion autotuner off it gave one result, at the patch's own
    cost. The patch under each of XLA's switches is a variant, the cheapest reproducible one is recommended, and the
    fix that takes one keeps the user's own XLA flags."""
    from types import SimpleNamespace

    from opbisect.execute.variants import Measured
    from opbisect.fix.plan import RoundPlan, Stop, keep_lines, recommendations
    from opbisect.record.verification import (
        XLA_DETERMINISTIC_OPS,
        XLA_NO_AUTOTUNING,
        XLA_NO_FUSION_AUTOTUNING,
        XLA_NO_TRITON_GEMM,
        Variant,
        Verification,
        decide,
    )
    from opbisect.report.verify_view import lines
    from opbisect.tfcompat import with_xla_flags
    from opbisect.verify import _child_runs, _variant

    on = SimpleNamespace(switches=True)
    assert [r.name for r in _child_runs(on, ([], []))] == [GLOBAL]  # outside XLA: no XLA variant
    runs = _child_runs(on, ([], []), xla=True)
    assert [(r.variant, r.name, r.env) for r in runs[1:]] == [
        ("patched", f"{PATCHED} + XLA_FLAGS={flag}", {"XLA_FLAGS": flag})
        for flag in (XLA_NO_FUSION_AUTOTUNING, XLA_NO_TRITON_GEMM, XLA_NO_AUTOTUNING, XLA_DETERMINISTIC_OPS)]
    assert XLA_NO_TRITON_GEMM.startswith(XLA_NO_FUSION_AUTOTUNING)  # narrowest first: each one the one before, and more
    assert _child_runs(SimpleNamespace(switches=False), ([], []), xla=True) == []  # --no-switches

    def v(run, distinct, ms):
        measured = Measured(results=[str(k % distinct) for k in range(10)], times=[ms / 1000] * 10)
        return _variant(run.name, run.how, measured, env=run.env)

    variants = [Variant(name=PLAIN, how="", runs=10, distinct=10, step_ms=6.6),
                Variant(name=PATCHED, how="", runs=10, distinct=3, step_ms=7.1),
                v(runs[0], 1, 18.6), v(runs[1], 1, 7.0), v(runs[2], 1, 7.5), v(runs[3], 1, 46.2), v(runs[4], 1, 216.0)]
    flag = f"XLA_FLAGS={XLA_NO_FUSION_AUTOTUNING}"
    assert variants[3].patched and variants[3].env == {"XLA_FLAGS": XLA_NO_FUSION_AUTOTUNING}
    assert variants[3].switches == []
    made = Verification(script="s.py", script_path="/s.py", device="GPU", patch="x.csv", runs=10, replaced=[],
                        skipped={}, renamed={}, not_ops={}, plain_spread=0.0, variants=variants,
                        recommendation=decide(variants))
    assert made.recommendation == f"{PATCHED} + {flag}" and made.exit_code == 0
    def pinned():
        return [line for line in lines(made) if line.startswith("pinned by experiment")]

    # varied, and under each switch it did not: the narrowest says what varies (the wider ones turn off more)
    assert len(pinned()) == 1 and f"under {XLA_NO_FUSION_AUTOTUNING} it does not" in pinned()[0]
    variants[3].distinct = 2  # lease24's H100: under the fusion switch 2 results, with Triton's GEMMs off one
    assert len(pinned()) == 1 and f"under {XLA_NO_TRITON_GEMM} it does not" in pinned()[0]
    variants[3].distinct = 1
    variants[1].distinct = 1
    assert not pinned()
    variants[1].distinct = 3
    recs = recommendations(RoundPlan(2, ops=("a",)), made, "/r/fix/patch.csv", Stop.NAMED_NOTHING)
    # the user's test tries them in turn, cheapest first, at most three: where fresh runs part under the fusion switch
    # (lease24's H100), Triton's GEMMs off as well is next
    assert [r.variant for r in recs] == [f"{PATCHED} + {flag}", f"{PATCHED} + XLA_FLAGS={XLA_NO_TRITON_GEMM}", GLOBAL]
    assert recs[1].env == {"XLA_FLAGS": XLA_NO_TRITON_GEMM} and recs[1].patch == "/r/fix/patch.csv"
    assert with_xla_flags({"XLA_FLAGS": "--mine"}, recs[1].env)["XLA_FLAGS"].split() == ["--mine",
                                                                                         *XLA_NO_TRITON_GEMM.split()]
    rec = recs[0]
    assert rec.env == {"XLA_FLAGS": XLA_NO_FUSION_AUTOTUNING} and rec.patch == "/r/fix/patch.csv"
    assert rec.command("train.py", []).endswith(" opbisect run --patch /r/fix/patch.csv train.py")
    assert keep_lines(rec, "fit")[0] == (f'os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + '
                                         f'" {XLA_NO_FUSION_AUTOTUNING}"  # before XLA first compiles')
    mine = {"XLA_FLAGS": "--xla_dump_to=/tmp/d", "HOME": "/h"}
    expected = {"XLA_FLAGS": f"--xla_dump_to=/tmp/d {XLA_NO_FUSION_AUTOTUNING}", "HOME": "/h"}
    assert with_xla_flags(mine, rec.env) == expected
    assert with_xla_flags({"HOME": "/h"}, rec.env) == {"HOME": "/h", **rec.env} and mine["HOME"] == "/h"


def test_only_a_run_that_differs_copies_the_state_to_the_host_and_the_spread_is_its_largest_difference(monkeypatch):
    """Confirming a variant runs it 100 times; a copy of the whole state each run cost 0.53 s of every 0.68 s on a 384
    MB state (the 2-core CPU). A run with the first run's fingerprints has the first run's bits: nothing to copy."""
    from opbisect.execute import variants

    real, copies = variants.values_after, []
    monkeypatch.setattr(variants, "values_after", lambda *a: copies.append(1) or real(*a))
    w = tf.Variable([1.0, 2.0])
    jitter = iter([0.0, 0.0, 0.25, 0.0, 0.5])  # the warm-up's, then each run's

    def restore():
        w.assign([1.0, 2.0])

    def step(noise):
        w.assign_add([noise, 0.0])
        return w + 0.0

    same = variants.measure(lambda: step(0.0), restore, lambda out: repr(out.numpy()), {"w": w}, 3, 12)
    assert len(same.results) == 12 and same.distinct == 1 and same.spread == 0.0 and len(copies) == 1
    copies.clear()
    varying = variants.measure(lambda: step(next(jitter)), restore, lambda out: repr(out.numpy()), {"w": w}, 4)
    assert varying.distinct == 3 and varying.spread == 0.5 and len(copies) == 3  # the first, and the two unlike it


def test_a_variant_whose_step_skips_the_update_the_plain_step_makes_is_marked_and_its_time_not_taken_as_the_steps():
    """BERT-base under mixed precision: under the global switch the step's gradients overflowed from verify's state
    every run, the loss scale halved and no weight moved: reproducible, and cheap, since it skipped the update."""
    import tensorflow as tf

    from opbisect.execute.variants import measure
    from opbisect.fix.plan import RoundPlan, _applying
    from opbisect.report.fix_view import describe
    from opbisect.verify import _variant

    weights, scale = tf.Variable([1.0, 2.0]), tf.Variable(32768.0)
    variables = {"dense/kernel": weights, "loss_scale": scale}
    start = {k: v.numpy() for k, v in variables.items()}

    def restore():
        for k, v in variables.items():
            v.assign(start[k])

    def step(finite):
        if finite:
            weights.assign_sub([0.5, 0.5])
        else:
            scale.assign(scale / 2)  # mixed precision's update skipped: only the scale moves
        return weights + 0.0

    plain = measure(lambda: step(True), restore, lambda out: repr(out.numpy()), variables, 3)
    skipping = measure(lambda: step(False), restore, lambda out: repr(out.numpy()), variables, 3)
    assert plain.unchanged == ["loss_scale"] and skipping.unchanged == ["dense/kernel"]
    v = _variant(GLOBAL, "", skipping, plain)
    assert v.reproducible and v.unlike_plain == ["dense/kernel", "loss_scale"]
    rec = _applying(v, RoundPlan(2, ops=("a",)), "p.csv")  # what fix recommends from it says so
    assert rec.unlike_plain and "skipped the plain step's update" in describe(rec)
    assert _variant(PATCHED, "", plain, plain).unlike_plain == []  # the plain step against itself


@pytest.mark.e2e  # its children are fresh processes
def test_the_patch_under_xlas_switches_runs_in_children_that_keep_the_users_xla_flags(tmp_path, monkeypatch):
    """On a CPU XLA's switches are not offered (XLA compiles the step on a GPU only where they are); forced here, the
    same children run: each under its flag added to the user's own, each its own variant, with its environment."""
    from opbisect import tfcompat
    from opbisect import verify as verifying
    from opbisect.record.verification import XLA_SWITCHES

    if not tf.__version__.startswith(tfcompat.XLA_FLAGS_CHECKED_ON):  # its XLA aborts on the flags (TF 2.16 did)
        pytest.skip(f"TensorFlow {tf.__version__}'s XLA does not know the flags: verify does not offer them there")
    log = tmp_path / "flags.txt"
    script = write_script(tmp_path, "model_step", XLA_LOOP + f"\nimport os\nwith open({str(log)!r}, 'a') as f:\n"
                                                            f"    f.write(os.environ.get('XLA_FLAGS', '') + '\\n')\n")
    monkeypatch.setattr(verifying, "_xla_switched", lambda step: True)
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=3")  # the user's own (the default)
    code, variants, record = verify(script, tmp_path, patch="ResourceScatterAdd,UnsortedSegmentSum", runs=2,
                                    confirm_runs=4, timing_runs=0)
    ran = {v["name"]: v for v in record["variants"]}
    for flag in XLA_SWITCHES:  # each alike in its 2 runs, and on to 4 in its own process
        v = ran[f"{PATCHED} + XLA_FLAGS={flag}"]
        assert (v["error"], v["patched"], v["env"], v["runs"]) == ("", True, {"XLA_FLAGS": flag}, 4)
    children = [line.split() for line in log.read_text().splitlines()[1:]]  # the first line is this process's
    # each switch last (XLA takes the last of a flag given twice), after the user's own flags, which stay first
    switched = [flag for c in children for flag in XLA_SWITCHES if " ".join(c).endswith(f" {flag}")]
    assert switched == list(XLA_SWITCHES)
    assert all(c[0] == "--xla_backend_optimization_level=3" for c in children)
    assert code == 0 and record["recommendation"] in ran


@pytest.mark.parametrize("version, jit, kind, offered", [
    ("2.21.0", True, "gpu", True), ("2.16.2", True, "gpu", False),  # TF 2.16's XLA aborts on the flags (its subset)
    ("2.21.0", False, "gpu", False), ("2.21.0", True, "cpu", False)])
def test_xlas_switches_are_offered_only_where_xla_compiles_on_a_gpu_and_knows_the_flags(version, jit, kind, offered):
    from types import SimpleNamespace

    from opbisect.verify import _xla_switched

    step = SimpleNamespace(trace=SimpleNamespace(jit_compile=jit), kind=kind,
                           prepared=SimpleNamespace(tf=SimpleNamespace(__version__=version)))
    assert _xla_switched(step) == offered


@pytest.mark.parametrize("mine", ["--xla_dump_to=/tmp/d --xla_backend_optimization_level=3", None])
def test_the_printed_run_command_keeps_the_users_own_xla_flags_as_the_users_test_did(tmp_path, mine):
    """The command fix prints runs the configuration its user's test ran: XLA's switch after the user's own XLA_FLAGS
    (a command that set XLA_FLAGS to the switch alone would drop them). Run by a shell, with `opbisect` a stand-in
    that prints what it got."""
    import os
    import subprocess

    from opbisect.record.fixing import Recommendation
    from opbisect.record.verification import XLA_NO_FUSION_AUTOTUNING
    from opbisect.tfcompat import with_xla_flags

    fake = tmp_path / "opbisect"
    fake.write_text('#!/bin/sh\nprintf "%s|%s|%s" "$XLA_FLAGS" "$TF_DETERMINISTIC_OPS" "$*"\n')
    fake.chmod(0o755)
    user = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    user = {**user, "PATH": f"{tmp_path}:{os.environ['PATH']}", **({"XLA_FLAGS": mine} if mine else {})}
    for env in ({"XLA_FLAGS": XLA_NO_FUSION_AUTOTUNING}, {"TF_DETERMINISTIC_OPS": "1"},
                {"XLA_FLAGS": "--xla_dump_to='/tmp/a b' $(false)"}):  # a value the shell must not read
        rec = Recommendation("v", patch="/r/fix/patch.csv", env=env)
        got = subprocess.run(["bash", "-c", rec.command("my train.py", ["--epochs", "2"])], env=user,
                             capture_output=True, text=True, check=True).stdout
        tested = with_xla_flags(user, env)
        assert got.split("|") == [tested.get("XLA_FLAGS", ""), tested.get("TF_DETERMINISTIC_OPS", ""),
                                  "run --patch /r/fix/patch.csv my train.py -- --epochs 2"]
