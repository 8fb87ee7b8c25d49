"""Seeded stateful random ops: every run starts them where a fresh process starts them, so they are no sources and
mask nothing after them; unseeded ones stay sources. The racy op behind a dropout is planted (a numpy_function that
sums in a new order on every call), not a live race."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from opbisect.execute.prepared import prepare
from opbisect.execute.seeded import BY_CACHE, BY_STATE
from opbisect.ir import optypes
from opbisect.settings import TraceSettings
from opbisect.targets.loader import importable

from conftest import child_env, write_script

TWIN_CASES = [("RandomUniform", tf.float32), ("RandomUniform", tf.float16), ("RandomUniform", tf.float64),
              ("RandomStandardNormal", tf.float32), ("RandomStandardNormal", tf.bfloat16),
              ("TruncatedNormal", tf.float32), ("RandomUniformInt", tf.int32), ("RandomUniformInt", tf.int64)]


def _draw(op_type: str, dtype, shape, seed: int, seed2: int):
    if op_type == "RandomUniformInt":
        return lambda: tf.raw_ops.RandomUniformInt(shape=shape, minval=tf.constant(-7, dtype),
                                                   maxval=tf.constant(1000, dtype), seed=seed, seed2=seed2)
    return lambda: getattr(tf.raw_ops, op_type)(shape=shape, dtype=dtype, seed=seed, seed2=seed2)


def _twin(op_type: str, dtype, shape, state):
    """What the rewritten step runs in the op's place: RngReadAndSkip, then the stateless op."""
    stateless = getattr(tf.raw_ops, optypes.info(op_type).generator)
    alg = tf.constant(optypes.PHILOX, tf.int32)

    def draw():
        at = tf.raw_ops.RngReadAndSkip(resource=state.handle, alg=alg, delta=tf.cast(tf.reduce_prod(shape), tf.uint64))
        common = dict(shape=shape, key=tf.bitcast(at[2:], tf.uint64), counter=tf.bitcast(at[:2], tf.uint64), alg=alg)
        if op_type == "RandomUniformInt":
            return stateless(**common, minval=tf.constant(-7, dtype), maxval=tf.constant(1000, dtype))
        return stateless(**common, dtype=dtype)

    return draw


@pytest.mark.parametrize("op_type,dtype", TWIN_CASES)
def test_each_generator_twin_draws_what_its_random_op_draws(op_type, dtype):
    # The op's kernel starts Philox at key=seed, counter=[0, seed2] and skips 256 samples an element per call: its
    # twin, from the state [0, seed2, seed], must give the very same numbers call after call.
    shape = tf.constant([3, 517], tf.int32)
    for seed, seed2 in [(42, 7), (87654321, 123), (1, 2**40 + 5)]:
        op = tf.function(_draw(op_type, dtype, shape, seed, seed2))
        state = tf.Variable([0, seed2, seed], dtype=tf.int64)
        twin = tf.function(_twin(op_type, dtype, shape, state))
        drawn, twins = [op().numpy() for _ in range(3)], [twin().numpy() for _ in range(3)]
        assert all(np.array_equal(a, b) for a, b in zip(drawn, twins)), (seed, seed2)
        assert not np.array_equal(drawn[0], drawn[1])  # the sequence moves on: what the restart undoes


SEEDED_NOISE = """
tf.random.set_seed(1)
w = tf.Variable(tf.ones([64, 8]), name="w")


@tf.function
def step(x):
    noise = tf.random.normal(tf.shape(x), stddev=0.1, name="noise")
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.matmul(x + noise, w) ** 2)
    w.assign_sub(1e-4 * tape.gradient(loss, w))
    return loss


inputs = (tf.constant(np.random.default_rng(0).normal(size=(16, 64)), tf.float32),)

if __name__ == "__main__":  # a fresh process: two steps, their losses' bits
    print(" ".join(step(*inputs).numpy().tobytes().hex() for _ in range(2)))
"""


def test_a_seeded_random_op_is_no_source_and_is_listed_once_with_its_site(run_step):
    t = run_step(SEEDED_NOISE, runs=4)
    assert t.code == 0 and t.sources == []
    (draw,) = t.record.seeded
    assert (draw.op_name, draw.op_type, draw.restart) == ("noise/RandomStandardNormal", "RandomStandardNormal",
                                                           BY_STATE)
    assert draw.site.startswith("model_step.py:")
    listed = json.loads((t.csv_path.parent / "report.json").read_text())["seeded"]  # the views read the record
    assert [d["op_name"] for d in listed] == ["noise/RandomStandardNormal"]


def test_the_restarted_step_draws_step_by_step_what_a_fresh_process_draws(tmp_path):
    # Run k of opbisect draws what a fresh process's first step draws, and step j of a run its j-th numbers.
    path = write_script(tmp_path, "noise_step", SEEDED_NOISE)
    fresh = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=child_env(), timeout=300)
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    with importable(path):
        prepared = prepare(TraceSettings(script=path, device="cpu"))
        snapshot, args = prepared.snapshot(), prepared.target.make_inputs()
        for _ in range(2):
            snapshot.restore()
            ours = " ".join(prepared.trace.concrete(*args).numpy().tobytes().hex() for _ in range(2))
            assert ours == fresh.stdout.strip()


UNSEEDED_NOISE = SEEDED_NOISE.replace("tf.random.set_seed(1)\n", "")


def test_an_unseeded_random_op_stays_a_random_source(run_step):
    t = run_step(UNSEEDED_NOISE, runs=4)
    assert t.code == 1 and t.sources == ["noise/RandomStandardNormal"]
    assert t.row("noise/RandomStandardNormal")["kind"] == "random"
    assert t.record.seeded == []


# A seeded dropout (tf_keras's own Dropout: a stateful RandomUniform with op seeds) before a layer that sums in a new
# order on every call. Every op after the dropout differs if the dropout draws anew, hiding the racy layer.
DROPOUT_BEFORE_RACY = """
import tf_keras

tf_keras.utils.set_random_seed(42)


def any_order_sum(x):
    # A large term and its negation among the chunks' sums: where they fall in the order decides how much of the sums
    # rounds away, so two orders differ by about one unit. A plain reordering differs by an ulp, which Adam's first
    # step and the batch's mean could round alike: the plain runs then agreed in 1 trace of 4 here.
    chunks = [c.sum(axis=1, keepdims=True, dtype=np.float32) for c in np.array_split(x, 16, axis=1)]
    chunks += [np.full_like(chunks[0], 1e7), np.full_like(chunks[0], -1e7)]
    total = np.zeros((x.shape[0], 1), np.float32)
    for k in np.random.default_rng().permutation(len(chunks)):
        total += chunks[k]
    return total


class RacySum(tf_keras.layers.Layer):
    def call(self, x):
        s = tf.numpy_function(any_order_sum, [x], tf.float32, name="racy_sum")
        return tf.ensure_shape(s, [None, 1])


model = tf_keras.Sequential([tf_keras.layers.Dense(64, activation="relu"), tf_keras.layers.Dropout(0.3), RacySum(),
                             tf_keras.layers.Dense(1)])
model.compile(optimizer=tf_keras.optimizers.Adam(1e-3), loss="mse")
rng = np.random.default_rng(0)
data = (rng.standard_normal((32, 16)).astype("float32") * 100, rng.standard_normal((32, 1)).astype("float32"))
"""


def test_a_seeded_dropout_masks_nothing_the_racy_layer_after_it_is_the_first_source(run_step):
    t = run_step(DROPOUT_BEFORE_RACY, runs=4, replay=False)
    assert t.code == 1
    assert t.sources[0].endswith("/racy_sum/racy_sum")  # Keras numbers the model's scope in a shared process
    assert not any("Random" in op for op in t.sources)
    assert [d.restart for d in t.record.seeded] == [BY_STATE]


@pytest.mark.parametrize("draw", [
    "tf.random.categorical(tf.math.log(tf.fill([8, 5], 0.2)), 3, seed=7, name='draw')",  # Multinomial: no twin
    "tf.random.shuffle(tf.range(16.0), seed=3, name='draw')",  # RandomShuffle: no twin
])
def test_a_seeded_op_with_no_generator_twin_is_restarted_by_clearing_the_kernels(run_step, draw):
    body = f"""
tf.random.set_seed(5)
w = tf.Variable(tf.zeros([]), name="w")


@tf.function
def step(x):
    w.assign_add(tf.reduce_sum(tf.cast({draw}, tf.float32) * tf.range(1.0, 17.0)[:1]) + x)
    return w.read_value()


inputs = (tf.constant(1.0),)
"""
    t = run_step(body, runs=3)
    assert t.code == 0 and t.sources == []
    assert [d.restart for d in t.record.seeded] == [BY_CACHE]


def test_a_seeded_op_inside_a_loop_body_is_restarted_by_clearing_the_kernels(run_step):
    t = run_step("""
tf.random.set_seed(5)
w = tf.Variable(tf.zeros([4]), name="w")


@tf.function
def step(n):
    for _ in tf.range(n):
        w.assign_add(tf.random.uniform([4], name="draw"))
    return w.read_value()


inputs = (tf.constant(3),)
""", runs=3)
    assert t.code == 0 and t.sources == []
    (draw,) = t.record.seeded
    assert draw.restart == BY_CACHE and "::" in draw.op_name


def test_the_restarted_ops_state_is_restored_where_the_script_names_its_variables(run_step):
    t = run_step(SEEDED_NOISE.replace('w = tf.Variable(tf.ones([64, 8]), name="w")',
                                      'w = tf.Variable(tf.ones([64, 8]), name="w")\nvariables = [w]'), runs=3)
    assert t.code == 0 and t.sources == []
    assert t.record.meta.restored_variables == 2  # w and the draw's state


def test_model_fit_with_a_seeded_dropout_is_deterministic(run_step):
    # model.fit runs Keras 2's own train function, whose dropout draws anew unless its kernel restarts every fit.
    t = run_step("""
import tf_keras

tf_keras.utils.set_random_seed(1)
model = tf_keras.Sequential([tf_keras.layers.Dense(16, activation="relu"), tf_keras.layers.Dropout(0.5),
                             tf_keras.layers.Dense(2)])
model.compile(optimizer="adam", loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
rng = np.random.default_rng(0)
dataset = tf.data.Dataset.from_tensor_slices((rng.standard_normal((64, 8)).astype("float32"),
                                              rng.integers(0, 2, 64).astype("int32"))).batch(16)
fit_kwargs = {"epochs": 2, "steps_per_epoch": 2}
""", runs=3)
    assert t.code == 0 and t.sources == []
    assert t.record.fit.first_differing_step() is None and t.record.fit.runs == 3
    assert [d.restart for d in t.record.seeded] == [BY_STATE]
