"""Each source replayed alone on its recorded inputs, and its standalone reproducer (run in a fresh process by
conftest.trace for every source that varied alone)."""

from __future__ import annotations

from conftest import NOISE_STEP, until_it_fires

# use_mode varies on identical inputs in the step because set_mode, which runs first, draws a new mode each run.
# Alone, nothing changes the mode: it does not vary. A source that needs its context.
CONTEXT = """
state = {"mode": 0.0}


def set_mode(x):
    state["mode"] = float(np.random.default_rng().integers(1, 1 << 20))
    return x


def use_mode(x):
    return (x + np.float32(state["mode"])).astype(np.float32)


w = tf.Variable(tf.ones([4]), name="w")


@tf.function
def step(x):
    a = tf.numpy_function(set_mode, [x], tf.float32, name="set_mode")
    with tf.control_dependencies([a]):
        b = tf.numpy_function(use_mode, [x], tf.float32, name="use_mode")
    w.assign_add(tf.ensure_shape(b, [4]))
    return tf.reduce_sum(w)


inputs = (tf.ones([4]),)
"""

# A racy CPU scatter after an ordinary write of the same variable: the replay must start from the state the first
# write left, which capture reads right after it.
SCATTER_AFTER_WRITE = """
table = tf.Variable(tf.ones([4, 64]), name="table")
rng = np.random.default_rng(1)
updates = tf.constant(rng.standard_normal((32768, 64)).astype(np.float32))
rows = tf.constant(rng.integers(0, 4, 32768).astype(np.int32))


@tf.function
def step(updates, rows):
    table.assign(table * 0.5)
    table.scatter_add(tf.IndexedSlices(updates, rows))
    return tf.reduce_sum(table)


inputs = (updates, rows)
"""


def test_a_random_op_varies_alone_and_its_reproducer_reproduces(run_step, tmp_path):
    t = run_step(NOISE_STEP, runs=3, replay_runs=5)
    row = t.row("noise/RandomUniform")
    assert (row["replay_runs"], row["replay_distinct"]) == (5, 5)
    assert row["reproducer"] == "repro/1_RandomUniform.py"
    folder = t.csv_path.parent
    assert (folder / "repro" / "1_RandomUniform.npz").exists()  # conftest ran it: it exited 1


def test_a_source_that_needs_its_context_does_not_vary_alone(run_step):
    t = run_step(CONTEXT, runs=3, replay_runs=5)
    assert t.sources == ["use_mode"]
    row = t.row("use_mode")
    assert (row["replay_runs"], row["replay_distinct"]) == (5, 1)
    source = t.record.sources[0]
    assert "Python code" in source.replay_note and not source.reproducer  # a py_function has no reproducer
    assert any("did not vary alone" in line for line in t.lines)


def test_a_write_is_replayed_from_the_state_the_write_before_it_left(run_step):
    t = until_it_fires(lambda: run_step(SCATTER_AFTER_WRITE, runs=6, replay_runs=10))
    assert t.sources == ["ResourceScatterAdd"] and t.row("ResourceScatterAdd")["kind"] == "write"
    row = t.row("ResourceScatterAdd")
    assert row["replay_runs"] == 10 and row["reproducer"] == "repro/1_ResourceScatterAdd.py"


def test_no_replay_leaves_the_columns_empty_and_writes_no_reproducer(run_step):
    t = run_step(NOISE_STEP, runs=3, replay=False)
    assert t.csv["replay_runs"].isna().all() and t.csv["reproducer"].isna().all()
    assert not (t.csv_path.parent / "repro").exists()
