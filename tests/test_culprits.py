"""End to end on CPU with real TensorFlow: real and injected culprits are named, and nothing else is."""

from __future__ import annotations

import runpy

import pytest

from opbisect.capture import builder
from opbisect.ir.graph import OpGraph

from conftest import EXAMPLES, cli, trace

RANDOM_STEP = """
w = tf.Variable(tf.ones([8, 4]), name="w")
x = tf.constant(np.arange(32, dtype=np.float32).reshape(4, 8) / 32)


@tf.function
def step(x):
    y = tf.matmul(x, w)
    noise = tf.random.uniform(tf.shape(w), name="noise")  # no seed: a fresh draw every run
    w.assign_sub(0.01 * (noise + tf.reduce_mean(y)))
    return tf.reduce_sum(y)


inputs = (x,)
"""

RACY_PYFUNC = """


def any_order_sum(x):
    # Sums the chunks in a new order on every call, as threads finishing in any order would: float addition is
    # not associative. The order is drawn unseeded, not left to real threads: beside two busy loops on two cores,
    # threads that slept at random still finished in one order often enough to hide this source in a CI run.
    chunks = np.array_split(x, 64)
    total = np.float32(0)
    for k in np.random.default_rng().permutation(len(chunks)):
        total += chunks[k].sum(dtype=np.float32)
    return np.float32(total)

"""

PYFUNC_STEP = RACY_PYFUNC + """
w = tf.Variable(tf.ones([256]), name="w")
x = tf.constant(np.random.default_rng(0).standard_normal(4096).astype(np.float32) * 1e4)


@tf.function
def step(x):
    s = tf.numpy_function(any_order_sum, [x], tf.float32, name="racy_sum")
    w.assign_add(tf.fill([256], s) * 1e-6)
    return s


inputs = (x,)
"""


def _the_race_fires(runs: int = 16) -> bool:
    """The oracle, apart from opbisect: the example's step run `runs` times in this process, each from the state it
    started in; whether the weights it leaves differ between runs."""
    example = runpy.run_path(str(EXAMPLES / "embedding_sgd.py"))
    weights = example["model"].variables
    state = weights + example["optimizer"].variables
    start = [v.numpy() for v in state]
    seen = set()
    for _ in range(runs):
        for v, value in zip(state, start):
            v.assign(value)
        example["step"](*example["inputs"])
        seen.add(b"".join(v.numpy().tobytes() for v in weights))
    return len(seen) > 1


@pytest.mark.races
def test_sgd_embedding_step_names_its_scatter_update_first(tmp_path):
    fired, named = 0, []
    for attempt in range(5):  # a real race: on a loaded machine a sample may not show it
        if not _the_race_fires():
            continue
        fired += 1
        # --max-runs looks again with more runs where the plain runs differ and the instrumented ones happen not to
        t = trace(EXAMPLES / "embedding_sgd.py", tmp_path / str(attempt), runs=6, magnitude_runs=8, max_runs=24)
        if t.code == 1 and t.record.sources:
            named.append(t)
            if t.record.sources[0].max_ulp_diff:  # its magnitude runs are runs of their own: the race fired there too
                break
    if not fired:  # as `git bisect run` reads 125: this machine's load kept the race from firing; nothing to compare
        pytest.skip("the race never fired for the oracle in 5 samples of 16 runs (a loaded machine): cannot test here")
    assert named, f"the oracle saw the race in {fired} of 5 samples; opbisect never named it"
    first = named[-1].csv.iloc[0]
    assert (first["rank"], first["op_type"], first["kind"]) == (1, "ResourceScatterSub", "write")
    assert first["affects_result"]
    assert f"{first['op_name']} is the first bad op" in named[-1].lines
    # Beside two busy loops and a second suite, the race fired in the plain runs of 5 traces and in none of their
    # magnitude runs (0 ulp, this session): the size is checked where it was measured.
    if first["max_ulp_diff"]:
        assert 0 < first["frac_elements_differing"] < 1


@pytest.mark.parametrize("fp", ["farmhash", "wsum", "fused"])
def test_unseeded_random_op_is_the_single_source(run_step, fp):
    t = run_step(RANDOM_STEP, fingerprint=fp)
    assert t.record.meta.fingerprint == fp
    assert t.code == 1
    assert t.sources == ["noise/RandomUniform"]
    row = t.row("noise/RandomUniform")
    assert row["kind"] == "random" and row["distinct_values"] == 4 and row["affects_result"]
    assert "stateless" in row["known_remedy"]
    assert row["source_location"].startswith("model_step.py:")


def test_numpy_function_summing_in_a_new_order_every_call_is_the_single_source(run_step):
    t = run_step(PYFUNC_STEP, runs=6)
    assert t.code == 1
    assert t.sources == ["racy_sum"]
    row = t.row("racy_sum")
    assert (row["op_type"], row["kind"]) == ("PyFunc", "op")
    assert row["downstream_differing"] >= 2  # the fill, the update...


def test_two_independent_sources_are_both_found(run_step):
    body = PYFUNC_STEP.replace("    w.assign_add(tf.fill([256], s) * 1e-6)",
                               "    w.assign_add(tf.fill([256], s) * 1e-6)\n"
                               "    v.assign_add(tf.random.normal([3], name='draw'))")
    body = body.replace('w = tf.Variable(tf.ones([256]), name="w")',
                        'w = tf.Variable(tf.ones([256]), name="w")\nv = tf.Variable(tf.zeros([3]), name="v")')
    t = run_step(body, runs=6)
    assert sorted(t.sources) == ["draw/RandomStandardNormal", "racy_sum"]
    assert dict(zip(t.csv["op_name"], t.csv["kind"])) == {"draw/RandomStandardNormal": "random", "racy_sum": "op"}


@pytest.mark.parametrize("tap_every", [False, True], ids=["element-wise derived", "every tensor tapped"])
def test_reads_after_a_nondeterministic_write_are_not_sources(run_step, tap_every):
    # A planted racy write: a py_function adds a different amount to the table in every run (a live CPU
    # scatter race fires too rarely on a loaded machine); everything that reads the table after it differs.
    t = run_step("""
        table = tf.Variable(tf.zeros([4, 64]), name="table")


        def racy_add(handle):
            noise = np.random.default_rng().standard_normal((4, 64)).astype(np.float32)  # unseeded
            tf.raw_ops.AssignAddVariableOp(resource=handle, value=tf.constant(noise))
            return np.int32(0)


        @tf.function
        def step(x):
            tf.py_function(racy_add, [table.handle], tf.int32)
            after = table.read_value()
            return tf.reduce_sum(after * after * x), tf.reduce_max(after)


        inputs = (tf.constant(2.0),)
        """, runs=4, tap_every=tap_every)
    assert t.code == 1
    assert t.sources == ["EagerPyFunc"]
    assert t.row("EagerPyFunc")["kind"] == "write"
    graph, differing = OpGraph.from_json(t.record.graph), set(t.record.analyses[0].differing)
    reads_after = [op for op in graph.ops if graph.op_type(op) == "ReadVariableOp" and graph.prior_writes(op, "table")]
    tapped = set(t.record.analyses[0].instrumented.taps)
    assert reads_after and all((f"{op}:0" in tapped) == tap_every for op in reads_after)
    # tapped, they differ, yet are no source; untapped, compare derives that they differ from the write before them
    assert all(f"{op}:0" in differing for op in reads_after if f"{op}:0" in tapped)
    assert t.row("EagerPyFunc")["downstream_differing"] >= len(reads_after) + 2


def test_a_variable_left_out_of_variables_is_reported_as_state(run_step):
    t = run_step("""
        w = tf.Variable(tf.ones([4]), name="w")
        counter = tf.Variable(0.0, name="counter")


        @tf.function
        def step(x):
            counter.assign_add(1.0)
            w.assign(w * 0.5 + counter)
            return tf.reduce_sum(x * w)


        inputs = (tf.ones([4]),)
        variables = [w]  # counter is not restored between runs
        """)
    assert t.code == 1
    assert t.sources == ["AssignAddVariableOp"]
    assert t.row("AssignAddVariableOp")["kind"] == "state"
    assert "restore it" in t.row("AssignAddVariableOp")["known_remedy"]


def test_deterministic_step_exits_0_with_a_header_only_csv(run_step):
    t = run_step("""
        w = tf.Variable(tf.linspace(0.0, 1.0, 64), name="w")


        @tf.function
        def step(x):
            y = tf.tanh(x * w)
            w.assign_sub(0.1 * y)
            return tf.reduce_sum(y)


        inputs = (tf.ones([64]),)
        """)
    assert t.code == 0
    assert t.csv.empty and "op_name" in t.csv.columns
    assert any("capture did not change the step's result" in line for line in t.lines)


def test_bert_like_step_is_deterministic_on_cpu(tmp_path):
    t = trace(EXAMPLES / "bert_like.py", tmp_path, runs=3)
    assert t.code == 0 and t.csv.empty
    assert t.record.meta.form == "step" and t.record.meta.restored_variables > 50


def test_bert_like_model_data_form_traces_the_models_own_train_step(tmp_path):
    t = trace(EXAMPLES / "bert_like_fit.py", tmp_path, runs=3)
    assert t.code == 0 and t.csv.empty
    assert t.record.meta.form == "keras"
    ops = set(OpGraph.from_json(t.record.graph).ops)
    assert any("Adam" in op or "adam" in op for op in ops)  # the compiled optimizer's update is in the step


def test_sgd_step_under_op_determinism_exits_0(tmp_path):
    script = tmp_path / "sgd_deterministic.py"
    script.write_text("import runpy\nimport tensorflow as tf\n\ntf.config.experimental.enable_op_determinism()\n"
                      f"globals().update(runpy.run_path({str(EXAMPLES / 'embedding_sgd.py')!r}))\n")
    done = cli("trace", str(script), "--runs", "6", "--out", str(tmp_path), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "sgd_deterministic" / "sources.csv").read_text().count("\n") == 1  # the header alone


def test_an_xla_compiled_step_is_analysed_under_xla(run_step):
    t = run_step("""
        w = tf.Variable(tf.ones([4, 4]), name="w")
        steps = tf.Variable(0.0, name="steps")


        @tf.function(jit_compile=True)
        def step(x, unused):
            steps.assign_add(1.0)
            y = tf.matmul(x, w) * steps
            w.assign_sub(0.01 * y)
            return tf.reduce_sum(y)


        inputs = (tf.ones([4, 4]), tf.zeros([2]))
        variables = [w]
        """)
    assert t.record.meta.jit_compile and t.record.meta.fingerprint == "wsum"
    assert t.code == 1 and t.sources == ["AssignAddVariableOp"]
    # under XLA the assignment's state is not tapped: it is named from the state it read, which differed before
    assert not any(tap.startswith("AssignAddVariableOp:") for tap in t.record.analyses[0].instrumented.taps)
    # grappler does not run on a jit-compiled step: no pinned pass (it would only compile the step again)
    assert t.record.pinned is None and t.record.facts.grappler.config == "default"
    assert "XLA" in t.record.facts.grappler.reason
    assert t.row("AssignAddVariableOp")["kind"] == "state"


def test_under_xla_fused_ops_are_not_tapped_and_a_source_behind_them_is_still_named(run_step):
    t = run_step("""
        w = tf.Variable(tf.ones([64]), name="w")


        @tf.function(jit_compile=True)
        def step(x):
            noise = tf.random.uniform([64])  # planted: unseeded, a fresh draw every run
            y = tf.tanh(tf.add_n([x * w, noise, x]) * 2.0)  # fused by XLA: untapped, so not what names the source
            w.assign_sub(0.1 * y)
            return tf.reduce_sum(y)


        inputs = (tf.ones([64]),)
        """)
    assert t.code == 1 and t.sources == ["random_uniform/RandomUniform"]
    taps = t.record.analyses[0].instrumented.taps
    graph = t.record.graph["nodes"]
    types = {n["id"]: n["type"] for n in graph}
    tapped_types = {types[tap.rsplit(":", 1)[0]] for tap in taps if ":" in tap and tap.rsplit(":", 1)[0] in types}
    assert {"Sum", "RandomUniform"} <= tapped_types
    assert not tapped_types & {"Mul", "AddN", "Tanh", "ReadVariableOp", "AssignSubVariableOp"}
    assert "AddN" in types.values()
    assert t.record.skipped[builder.FUSED_BY_XLA] >= 5
    assert t.row("random_uniform/RandomUniform")["downstream_differing"] >= 2  # the sum, the write


def test_an_xla_step_with_complex_tensors_is_traced(run_step):
    t = run_step("""
        w = tf.Variable(tf.ones([8]), name="w")


        @tf.function(jit_compile=True)
        def step(x):
            noise = tf.random.uniform([8])  # planted: unseeded, a fresh draw every run
            spectrum = tf.signal.fft(tf.complex(x * w + noise, tf.zeros_like(x)))
            w.assign_add(tf.math.real(spectrum) * 1e-3)
            return tf.reduce_sum(tf.abs(spectrum))


        inputs = (tf.ones([8]),)
        """)
    assert t.record.meta.jit_compile and t.record.meta.fingerprint == "wsum"
    assert t.code == 1 and t.sources == ["random_uniform/RandomUniform"]
    assert any(t.endswith(":0") and "FFT" in t for t in t.record.analyses[0].differing)  # the complex tensor
