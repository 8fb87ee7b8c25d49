"""Inside loops and branches: a source in a body is named as the op inside it, with its region and iteration.

Planted faults (a numpy_function that varies only at a chosen loop iteration, an unseeded random trip count or
predicate) force each case whatever the machine's load, the Keras ones included (a LossScaleOptimizer's cond in
the fit form, a gradient-accumulation loop); the examples with real CPU races are run by hand and in the reports.
"""

from __future__ import annotations

from conftest import until_it_fires

NOISY_AT = """
def noisy_at(k):
    def f(x, i):  # varies only when the loop is at iteration k
        return (x + np.random.random(x.shape) * (i == k)).astype(np.float32)
    return f


v = tf.Variable(tf.zeros([4]), name="v")
"""

COND_IN_WHILE = NOISY_AT + """

@tf.function
def step(x):
    def body(i, s):
        v.assign_add(x)  # a write every iteration, read by the next: state carried across iterations
        r = tf.cond(i > 0, lambda: tf.numpy_function(noisy_at({k}), [v.read_value(), i], tf.float32),
                    lambda: v.read_value())
        return i + 1, s + tf.reduce_sum(r)
    _, total = tf.while_loop(lambda i, s: i < 4, body, (tf.constant(0), tf.constant(0.0)))
    return total


inputs = (tf.ones([4]),)
"""


def test_a_source_in_a_cond_inside_a_while_is_named_inside_both_at_its_iteration(run_step):
    t = run_step(COND_IN_WHILE.replace("{k}", "2"), runs=3)
    assert t.code == 1
    assert len(t.csv) == 1, t.csv
    row = t.csv.iloc[0]
    assert row["op_type"] == "PyFunc" and row["kind"] == "op"
    assert row["region"] == "while/body::while/cond/then_branch"
    assert row["op_name"].startswith(row["region"] + "::")
    assert row["iteration"] == 2
    assert bool(row["affects_result"])


def test_a_deterministic_loop_with_a_branch_and_carried_state_has_no_source(run_step):
    t = run_step(COND_IN_WHILE.replace("{k}", "99"), runs=3)  # the noise never fires
    assert t.code == 0
    assert t.csv.empty
    ins = t.record.analyses[0].instrumented
    assert ins.executions["while/body"] == [4, 4, 4]
    assert ins.executions["while/body::while/cond/then_branch"] == [3, 3, 3]
    assert ins.executions["while/body::while/cond/else_branch"] == [1, 1, 1]
    assert any(tap.startswith("while/body::") and tap.endswith("@3") for tap in ins.taps)


TRIP_COUNT = """
v = tf.Variable(tf.zeros([]), name="v")


@tf.function
def step():
    n = tf.random.uniform([], 1, 1000, dtype=tf.int32, name="trips")  # unseeded: another trip count each run
    def body(i):
        v.assign_add(1.0)
        return (i + 1,)
    tf.while_loop(lambda i: i < n, body, (tf.constant(0),))
    return v.read_value()


inputs = ()
"""


def test_a_trip_count_that_differs_is_a_finding_and_the_source_is_upstream_of_the_condition(run_step):
    t = run_step(TRIP_COUNT, runs=3)
    assert t.code == 1
    assert list(t.csv["op_name"]) == ["trips"]
    assert t.csv.iloc[0]["kind"] == "random"
    counts = t.record.analyses[0].instrumented.executions["while/body"]
    assert len(set(counts)) > 1
    assert any(f.level == "warning" and f.message.startswith("while/body ran") for f in t.record.findings)


BRANCH = """
v = tf.Variable(tf.zeros([]), name="v")


@tf.function
def step():
    heads = tf.random.uniform([], name="coin") < 0.5  # unseeded: another branch in some runs
    tf.cond(heads, lambda: v.assign_add(1.0), lambda: v.assign_sub(1.0))
    return v.read_value()


inputs = ()
"""


def test_a_branch_taken_differently_is_a_finding_and_the_source_is_the_predicate(run_step):
    t = until_it_fires(lambda: run_step(BRANCH, runs=6),
                       also=lambda t: len(set(t.record.analyses[0].instrumented.executions["cond/then_branch"])) > 1)
    assert t.code == 1
    assert list(t.csv["op_name"]) == ["coin/RandomUniform"]
    assert any("which branch runs" in f.message for f in t.record.findings)


MIXED_PRECISION_FIT = """
import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(0)
keras.mixed_precision.set_global_policy("mixed_float16")


class NoisySGD(keras.optimizers.SGD):  # planted: the Dense kernel's update varies in every run
    def update_step(self, gradient, variable, learning_rate):
        if tuple(variable.shape) == (16, 4):  # the Dense kernel
            noise = tf.numpy_function(lambda: np.float32(np.random.default_rng().random() * 1e-3), [], tf.float32,
                                      name="noise")
            gradient = gradient + tf.cast(noise, gradient.dtype)
        super().update_step(gradient, variable, learning_rate)


model = keras.Sequential([keras.Input((8,), dtype="int32"), keras.layers.Embedding(100, 16),
                          keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(4, dtype="float32")])
model.compile(optimizer=NoisySGD(0.1), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
rng = np.random.default_rng(0)
x = rng.integers(0, 100, (64, 8)).astype("int32")
y = rng.integers(0, 4, (64,)).astype("int32")
fit_kwargs = {"batch_size": 32, "epochs": 1, "shuffle": False}
"""


def test_mixed_precision_fit_names_a_source_inside_the_loss_scale_optimizer_cond(run_step):
    t = run_step(MIXED_PRECISION_FIT, runs=3)
    assert t.code == 1 and t.record.meta.form == "fit"
    rows = t.csv[t.csv["op_type"] == "PyFunc"]
    assert list(rows["region"]) == ["cond/then_branch"]  # LossScaleOptimizer's update, entered
    assert rows.iloc[0]["first_step"] == 1
    assert not any(t.csv["op_type"].isin(["If", "StatelessIf"]))
    import keras

    assert keras.mixed_precision.global_policy().name == "float32"  # the script's policy does not leak out


GRADIENT_ACCUMULATION = """
import keras
import numpy as np
import tensorflow as tf

keras.utils.set_random_seed(0)
MICRO, N_MICRO = 32, 4


class NoisyFrom(keras.layers.Layer):  # planted: varies in every run once the loop reaches micro-batch 2
    def call(self, x, i):
        draw = lambda i: np.float32(np.random.default_rng().random() * (i >= 2))  # noqa: E731
        noise = tf.numpy_function(draw, [i], tf.float32, name="noise")
        return x * (1 + tf.ensure_shape(noise, []))  # a scale: softmax ignores a shift of every logit


model = keras.Sequential([keras.Input((8,), dtype="int32"), keras.layers.Embedding(100, 16),
                          keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(4)])
noisy = NoisyFrom()
optimizer = keras.optimizers.SGD(learning_rate=0.1)
optimizer.build(model.trainable_variables)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
accumulators = [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False, name=f"accum_{i}")
                for i, v in enumerate(model.trainable_variables)]


@tf.function
def step(x, y):
    for a in accumulators:
        a.assign(tf.zeros_like(a))

    def body(i, loss_sum):
        xb, yb = x[i * MICRO:(i + 1) * MICRO], y[i * MICRO:(i + 1) * MICRO]
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, noisy(model(xb, training=True), i))
        for a, g in zip(accumulators, tape.gradient(loss, model.trainable_variables)):
            if isinstance(g, tf.IndexedSlices):
                a.scatter_add(g)
            else:
                a.assign_add(g)
        return i + 1, loss_sum + loss

    _, total = tf.while_loop(lambda i, _: i < N_MICRO, body, (tf.constant(0), tf.constant(0.0)))
    optimizer.apply_gradients(zip([a / N_MICRO for a in accumulators], model.trainable_variables))
    return total / N_MICRO


rng = np.random.default_rng(0)
inputs = (tf.constant(rng.integers(0, 100, (MICRO * N_MICRO, 8)), tf.int32),
          tf.constant(rng.integers(0, 4, (MICRO * N_MICRO,)), tf.int32))
"""


def test_gradient_accumulation_names_the_source_inside_the_while_body_at_its_micro_batch(run_step):
    t = run_step(GRADIENT_ACCUMULATION, runs=3)
    assert t.code == 1
    rows = t.csv[t.csv["op_type"] == "PyFunc"]
    assert list(zip(rows["region"], rows["iteration"])) == [("while/body", 2)]
    assert not any(t.csv["op_type"].isin(["While", "StatelessWhile"]))


XLA_LOOP = """
v = tf.Variable(tf.zeros([4]), name="v")


@tf.function(jit_compile=True)
def step(x):
    def body(i, s):
        v.assign_add(x)
        noisy = tf.cond(i > 1, lambda: v + tf.random.uniform([4], name="noise"), lambda: v * 2.0)
        return i + 1, s + tf.reduce_sum(noisy)
    _, total = tf.while_loop(lambda i, s: i < 4, body, (tf.constant(0), tf.constant(0.0)))
    return total


inputs = (tf.ones([4]),)
"""


def test_under_xla_a_source_in_a_branch_inside_a_loop_is_named_with_its_iteration(run_step):
    t = run_step(XLA_LOOP, runs=3)
    assert t.record.meta.jit_compile and t.code == 1
    assert list(t.csv["region"]) == ["while/body::while/cond/then_branch"]
    row = t.csv.iloc[0]
    assert row["op_type"] == "RandomUniform" and row["kind"] == "random" and row["iteration"] == 2
    assert t.record.analyses[0].instrumented.executions["while/body"] == [4, 4, 4]


NESTED_LOOPS = NOISY_AT + """

@tf.function
def step(x):
    def outer(i, s):
        def inner(j, t):  # restarts at j = 0 on every outer iteration
            noisy = tf.numpy_function(noisy_at(1), [v.read_value(), j * tf.cast(i == 2, tf.int32)], tf.float32)
            return j + 1, t + tf.reduce_sum(noisy)
        _, t = tf.while_loop(lambda j, t: j < 2, inner, (tf.constant(0), s))
        v.assign_add(x)
        return i + 1, t
    _, total = tf.while_loop(lambda i, s: i < 3, outer, (tf.constant(0), tf.constant(0.0)))
    return total


inputs = (tf.ones([4]),)
"""


def test_a_source_in_a_nested_loop_is_named_at_the_inner_loops_own_iteration(run_step):
    t = run_step(NESTED_LOOPS, runs=3)  # varies at inner iteration 1 of outer iteration 2: execution 5 of 6
    assert t.code == 1
    assert len(t.csv) == 1 and t.csv.iloc[0]["op_type"] == "PyFunc"
    assert t.csv.iloc[0]["region"] == "while/body::while/while/body"
    assert t.csv.iloc[0]["iteration"] == 1
    ins = t.record.analyses[0].instrumented
    assert ins.executions["while/body::while/while/body"] == [6, 6, 6]
    assert ins.enclosing["while/body::while/while/body"] == [0, 0, 1, 1, 2, 2]


SWITCH_CASE = NOISY_AT + """

@tf.function
def step(x, k):
    v.assign_add(x)
    out = tf.switch_case(k, [lambda: v * 2.0,
                             lambda: tf.numpy_function(noisy_at(0), [v.read_value(), 0], tf.float32),
                             lambda: v - 1.0])
    return tf.reduce_sum(out)


inputs = (tf.ones([4]), tf.constant(1))
"""


def test_a_source_in_a_switch_case_branch_is_named_in_that_branch(run_step):
    t = run_step(SWITCH_CASE, runs=3)
    assert t.code == 1
    assert list(t.csv["op_type"]) == ["PyFunc"]
    region = t.csv.iloc[0]["region"]
    assert region.endswith("/branch1")
    executions = t.record.analyses[0].instrumented.executions
    assert executions[region] == [1, 1, 1]
    assert all(n == [0, 0, 0] for r, n in executions.items() if r != region)
