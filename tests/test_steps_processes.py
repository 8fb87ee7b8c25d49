"""Across steps and across processes: first-step bisection, pipelines, fit's epochs, fresh processes."""

from __future__ import annotations

import os

import pandas as pd

from opbisect.analysis.align import align
from opbisect.ir.graph import OpGraph
from opbisect.record import store

from conftest import cli, trace, write_script

DIVERGES_FROM_STEP_3 = """
table = tf.Variable(tf.zeros([64, 32]), name="table")
w = tf.Variable(tf.ones([32]), name="w")


def jitter(x, on):  # a planted source: varies in every run, from the step whose batch switches it on
    return (x + on * np.random.random(x.shape)).astype(np.float32)


def batches():
    rng = np.random.default_rng(0)
    for k in range(5):  # steps 1 and 2 leave it off, steps 3 to 5 switch it on
        yield tf.constant(rng.standard_normal((64, 32)).astype(np.float32)), tf.constant(float(k >= 2))


@tf.function
def step(updates, on):
    table.assign_add(tf.numpy_function(jitter, [updates, on], tf.float32, name="jitter") * w)
    w.assign(w * 0.99 + 0.01 * tf.reduce_mean(table, axis=0))
    return tf.reduce_sum(table)


inputs = next(batches())
"""

HASH_ORDER = """
NAMES = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
scales = {n: tf.Variable(float(10 ** (3 * (i % 3)) * (-1) ** i), name=n) for i, n in enumerate(NAMES)}
w = tf.Variable(tf.ones([8]), name="w")


@tf.function
def step(x):
    terms = [x * scales[name] + 0.1 for name in set(NAMES)]  # set order: PYTHONHASHSEED decides
    total = tf.add_n(terms, name="total")
    w.assign_add(total * 1e-3)
    return tf.reduce_sum(total)


inputs = (tf.constant(np.linspace(0.1, 0.9, 8, dtype=np.float32)),)
"""


def test_first_step_bisection_names_the_step_where_runs_part_and_the_op(run_step):
    # A planted source (not a live race, which fires later or not at all on a loaded machine: CI saw both)
    t = run_step(DIVERGES_FROM_STEP_3, steps=5, runs=3)
    assert t.code == 1
    assert t.record.default.first_differing_step() == 3
    growth = t.record.default.differing_variables()  # table and w, from step 3 on
    assert growth[:2] == [0, 0] and all(n == 2 for n in growth[2:])
    assert t.sources == ["jitter"] and t.row("jitter")["first_step"] == 3
    assert any("step 3 is the first differing step" in line for line in t.lines)
    assert "jitter is the first bad op (step 3)" in t.lines


def test_a_tf_data_pipeline_with_deterministic_false_is_reported_as_input(run_step):
    t = run_step("""
        import time

        w = tf.Variable(tf.ones([8]), name="w")
        late = [0]  # the element each pass over the dataset holds back: another in every run


        def slow(x):
            # A planted order, not a live race: under load a race may come out the same every time, but an
            # element held back 0.3 s comes out after its 7 neighbours, and with deterministic=False after them it goes.
            time.sleep(0.3 if int(x) == late[0] else 0.0)
            return x


        dataset = tf.data.Dataset.range(64).map(lambda x: tf.fill([8], tf.py_function(slow, [x], tf.int64)),
                                                num_parallel_calls=8, deterministic=False)


        def batches():
            late[0] = (late[0] + 1) % 3
            return ((tf.cast(element, tf.float32),) for element in dataset)


        @tf.function
        def step(x):
            w.assign_sub(0.01 * x * w)
            return tf.reduce_sum(w)


        inputs = next(batches())
        """, steps=3, runs=5)
    findings = [f.message for f in t.record.findings]
    assert any(m.startswith("input: ParallelMapDatasetV2 runs with deterministic=False") for m in findings)
    assert t.code == 1 and t.record.default.differing_batches()
    assert list(t.csv["kind"]) == ["input"] and t.csv.iloc[0]["op_type"] == "Placeholder"


FIT_EPOCHS = """
import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(0)


class NoisyOnRepeats(keras.layers.Layer):  # planted: varies only on a batch of repeated tokens (the second)
    def call(self, inputs):
        h, tokens = inputs
        draw = lambda t: np.float32(np.random.default_rng().random() * (t.max() < 16))  # noqa: E731
        noise = tf.numpy_function(draw, [tokens], tf.float32, name="noise")
        return h * (1 + tf.ensure_shape(noise, []))  # a scale: softmax ignores a shift of every logit


tokens = keras.Input((8,), dtype="int32")
h = keras.layers.Dense(4)(keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(1024, 16)(tokens)))
model = keras.Model(tokens, NoisyOnRepeats()([h, tokens]))
model.compile(optimizer=keras.optimizers.SGD(0.1), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
rng = np.random.default_rng(0)
distinct_tokens = rng.permutation(1024).reshape(128, 8).astype("int32")
repeated_tokens = rng.integers(0, 16, (128, 8)).astype("int32")
labels = rng.integers(0, 4, (2, 128)).astype("int32")
dataset = tf.data.Dataset.from_tensor_slices((np.stack([distinct_tokens, repeated_tokens]), labels))
fit_kwargs = {"epochs": 2, "steps_per_epoch": 1}
"""


def test_fit_reproducible_for_one_epoch_and_not_for_two_names_the_second_epochs_source(tmp_path):
    """The seed report's situation (examples/fit_epochs.py has the real CPU race): fit(epochs=1) reproducible,
    epochs=2 not, with one iterator across the epochs (steps_per_epoch)."""
    script = write_script(tmp_path, "fit_epochs", FIT_EPOCHS)
    two = trace(script, tmp_path, runs=3)
    assert two.code == 1 and two.record.meta.form == "fit" and two.record.steps == 2
    assert two.record.fit.first_differing_step() == 2  # model.fit itself parts at epoch 2
    assert two.record.fit.differing_variables()[0] == 0
    assert two.record.facts.fit_replay.checked_steps == 1 and two.record.facts.fit_replay.mismatch_step is None
    top = two.csv.iloc[0]
    assert (top["op_type"], top["kind"], top["first_step"]) == ("PyFunc", "op", 2)
    one = tmp_path / "fit_one_epoch.py"
    one.write_text(f"import runpy\nglobals().update(runpy.run_path({str(script)!r}))\n"
                   "fit_kwargs = {'epochs': 1, 'steps_per_epoch': 1}\n")
    single = trace(one, tmp_path, runs=3)
    assert single.code == 0 and single.csv.empty and single.record.fit.steps == 1


def _no_hash_seed() -> dict:
    return {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}


def test_cross_process_run_finds_a_hash_seed_dependent_addn_order(tmp_path):
    script = write_script(tmp_path, "hash_order", HASH_ORDER)
    env = _no_hash_seed()
    done = cli("trace", str(script), "--runs", "3", "--processes", "3", "--out", str(tmp_path), "--no-progress",
               env=env, clear_env=True)
    # Under the user's grappler config the arithmetic optimizer puts the AddN's inputs in one order, so every
    # process ends identically: the step is deterministic (exit 0). Pinned, the processes differ, and the op
    # behind it is named.
    assert done.returncode == 0, done.stderr
    record = store.load(tmp_path / "hash_order")
    assert record.processes.hash_seeds == ["1", "2", "3"] and not record.processes.differs
    assert record.processes.pinned_first_differing_step == 1
    assert record.default.first_differing_step() is None  # inside one process it is reproducible
    csv = pd.read_csv(tmp_path / "hash_order" / "sources.csv")
    row = csv[csv["op_name"] == "total"].iloc[0]
    assert (row["op_type"], row["kind"], row["seen_across"]) == ("AddN", "order", "processes")


def test_cross_process_run_finds_an_unseeded_initializer(tmp_path):
    script = write_script(tmp_path, "unseeded", """
        w = tf.Variable(tf.random.normal([4, 4]), name="w")  # no seed: another start in every process


        @tf.function
        def step(x):
            y = tf.matmul(x, w)
            w.assign_sub(0.1 * y)
            return tf.reduce_sum(y)


        inputs = (tf.eye(4),)
        """)
    done = cli("trace", str(script), "--runs", "2", "--processes", "2", "--out", str(tmp_path), "--no-progress")
    assert done.returncode == 1, done.stderr
    assert "1 variable(s) start with different values in different processes (w)" in done.stdout
    csv = pd.read_csv(tmp_path / "unseeded" / "sources.csv")
    # the fresh-process check names the variable and its cause; the processes' step-1 read of it is not said again
    assert list(zip(csv["op_name"], csv["kind"], csv["seen_across"])) == [("w", "init", "processes")]
    assert "set_random_seed" in csv.iloc[0]["known_remedy"]


def graph_of(ops: list[tuple[str, str, list[str]]], roles: dict | None = None) -> OpGraph:
    g = OpGraph()
    for name, op_type, _ in ops:
        g.add_op(name, type=op_type, outputs=[("float32", "()")], role=(roles or {}).get(name, ""))
    for name, _, inputs in ops:
        for slot, src in enumerate(inputs):
            g.add_data_edge(src, 0, name, slot)
    return g


def test_alignment_follows_structure_when_names_shift():
    a = graph_of([("x", "Placeholder", []), ("mul", "Mul", ["x", "x"]), ("tanh", "Tanh", ["mul"]),
                  ("exp", "Exp", ["x"]), ("out", "Sub", ["tanh", "exp"])], roles={"x": "arg:0"})
    # The same computation; every name shifted (uniquification), created in another order.
    b = graph_of([("x_1", "Placeholder", []), ("exp_7", "Exp", ["x_1"]), ("mul_3", "Mul", ["x_1", "x_1"]),
                  ("tanh_2", "Tanh", ["mul_3"]), ("out_9", "Sub", ["tanh_2", "exp_7"])], roles={"x_1": "arg:0"})
    al = align(a, b)
    assert al.pairs == {"x": "x_1", "mul": "mul_3", "tanh": "tanh_2", "exp": "exp_7", "out": "out_9"}
    assert al.only_a == [] and al.only_b == [] and al.reordered == []
    assert al.tensor("tanh:0") == "tanh_2:0"


def test_alignment_tells_a_reordered_sum_from_a_different_graph():
    ops = [("p", "Placeholder", []), ("q", "Placeholder", []), ("r", "Placeholder", []),
           ("sin", "Sin", ["p"]), ("cos", "Cos", ["q"])]
    roles = {"p": "arg:0", "q": "arg:1", "r": "arg:2"}
    a = graph_of(ops + [("sum", "AddN", ["sin", "cos", "r"])], roles)
    b = graph_of(ops + [("sum", "AddN", ["r", "sin", "cos"])], roles)
    al = align(a, b)
    assert al.reordered == [("sum", "sum")] and not al.only_a
    c = graph_of(ops + [("sum", "AddN", ["sin", "cos", "sin"])], roles)  # other inputs: not a reorder
    al = align(a, c)
    assert al.reordered == [] and al.only_a == ["sum"] and al.only_b == ["sum"]
    d = graph_of(ops + [("sum", "Sub", ["sin", "cos"])], roles)  # non-commutative ops keep their order
    e = graph_of(ops + [("sum", "Sub", ["cos", "sin"])], roles)
    assert align(d, e).only_a == ["sum"]


DUPLICATE_NAMES = """
import keras

keras.utils.set_random_seed(0)


class Block(keras.layers.Layer):
    # Dense layers created inside a custom layer: their variables share the names kernel and bias.
    def __init__(self):
        super().__init__()
        self.layers_ = [keras.layers.Dense(4) for _ in range(3)]

    def call(self, x):
        for layer in self.layers_:
            x = layer(x)
        return x


model = keras.Sequential([keras.Input((4,)), Block(), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
data = (np.linspace(0, 1, 32, dtype=np.float32).reshape(8, 4), np.ones((8, 1), np.float32))
"""


def test_variables_sharing_a_name_pair_up_across_processes_by_creation_order(tmp_path):
    script = write_script(tmp_path, "duplicate_names", DUPLICATE_NAMES)
    done = cli("trace", str(script), "--runs", "2", "--processes", "2", "--out", str(tmp_path), "--no-progress",
               env=_no_hash_seed(), clear_env=True)
    record = store.load(tmp_path / "duplicate_names")
    names = [k.partition("#")[0] for k in record.meta.initial_state]
    assert len(names) > len(set(names))  # several variables do share a name
    assert done.returncode == 0, done.stdout + done.stderr
    assert not record.processes.differs and record.sources == []


FIT_DENSE = """
import keras

keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse", steps_per_execution={spe})
rng = np.random.default_rng(0)
x = rng.standard_normal((100, 8)).astype("float32")  # 100 rows at batch 32: a last batch of 4
y = rng.standard_normal((100, 1)).astype("float32")
fit_kwargs = {{"batch_size": 32, "epochs": 2, "shuffle": False}}
"""


def test_fit_with_a_partial_last_batch_is_replayed_as_fit_runs_it(run_step):
    t = run_step(FIT_DENSE.format(spe=1), runs=2)
    assert t.code == 0
    assert t.record.default.steps == 8  # 4 batches (the last of 4 rows) per epoch, 2 epochs
    replay = t.record.facts.fit_replay
    assert replay.mismatch_step is None and replay.checked_steps == 8


def test_fit_with_steps_per_execution_is_checked_at_the_steps_fit_reports(run_step):
    t = run_step(FIT_DENSE.format(spe=3), runs=2)
    assert t.code == 0
    fit = t.record.fit
    assert fit.steps_at == [3, 4, 7, 8]  # each epoch: one execution of 3 steps, then the last step alone
    replay = t.record.facts.fit_replay
    assert replay.mismatch_step is None and replay.checked_steps == 8
