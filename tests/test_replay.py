"""Each source replayed alone on its recorded inputs, and its standalone reproducer (run in a fresh process by
conftest.trace for every source that varied alone)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from opbisect.capture import builder, fingerprint
from opbisect.capture import taps as capture
from opbisect.capture.values import BodyValues, UnfixedShape
from opbisect.execute import steps
from opbisect.execute.steps import WITHOUT_XLA
from opbisect.ir import optypes
from opbisect.replay import reproducer, rerun
from opbisect.replay.call import Arg, OpCall
from opbisect.targets.loader import importable, load_target
from opbisect.trace.trace import trace_step

from conftest import NOISE_STEP, ROOT, until_it_fires, write_script

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


# A kernel with a scratch output, as cuDNN's reserve space is: its first output is its result, its second holds
# whatever it drew. The step uses the result and hands the scratch to a consumer that ignores it.
SCRATCH = """
w = tf.Variable(tf.ones([4]), name="w")


def kernel(x):
    return x * 2, np.random.default_rng().standard_normal(4).astype(np.float32)


def consume(y, scratch):
    return y + 1


@tf.function
def step(x):
    y, scratch = tf.numpy_function(kernel, [x], [tf.float32, tf.float32], name="kernel")
    z = tf.numpy_function(consume, [y, scratch], tf.float32, name="consume")
    w.assign_add(tf.ensure_shape(z, [4]))
    return tf.reduce_sum(w)


inputs = (tf.ones([4]),)
"""


def _with_workspace(monkeypatch, op_type: str, ports: set[int]) -> None:
    monkeypatch.setitem(optypes.TABLE, op_type, dataclasses.replace(optypes.info(op_type), workspace=frozenset(ports)))


def test_an_output_the_table_calls_workspace_is_not_compared_and_what_reads_it_is_judged_by_the_rest(run_step,
                                                                                                     monkeypatch):
    control = run_step(SCRATCH, name="control", runs=3, replay=False)
    assert control.sources == ["kernel"] and control.record.sources[0].tensors == ["kernel:1"]
    _with_workspace(monkeypatch, "PyFunc", {1})
    t = run_step(SCRATCH, runs=3, replay=False)
    assert (t.code, t.sources) == (0, [])
    assert t.record.skipped[builder.WORKSPACE] == 1


def test_a_replay_and_its_reproducer_compare_only_the_outputs_with_a_defined_value(monkeypatch, tmp_path):
    """LogUniformCandidateSampler draws its candidates (output 0; output 2 follows them); the expected counts of the
    true classes (output 1) are fixed by its arguments. With 0 and 2 called workspace, alone it does not vary."""
    call = OpCall(op="sampler", op_type="LogUniformCandidateSampler", args=[Arg("true_classes", ["c:0"], False)],
                  attrs=dict(num_true=1, num_sampled=4, unique=False, range_max=1000, seed=0, seed2=0),
                  device="/device:CPU:0")
    values = {"c:0": np.array([[3], [7]], np.int64)}

    def reproduces() -> int:
        for path, content in reproducer.files(call, values, {}, reproducer.Heading(1, "s.py", 5, "")).items():
            (tmp_path / path).parent.mkdir(exist_ok=True)
            (tmp_path / path).write_bytes(content.encode() if isinstance(content, str) else content)
        return subprocess.run([sys.executable, str(tmp_path / "repro/1_LogUniformCandidateSampler.py")],
                              capture_output=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}).returncode

    assert rerun.replay(call, values, {}, 5, "cpu").distinct > 1 and reproduces() == 1
    _with_workspace(monkeypatch, "LogUniformCandidateSampler", {0, 2})
    assert rerun.replay(call, values, {}, 5, "cpu").distinct == 1 and reproduces() == 0


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


# Inside a loop body: the write before the scatter, and the racy scatter itself, run at every iteration.
SCATTER_IN_LOOP = SCATTER_AFTER_WRITE.replace("""    table.assign(table * 0.5)
    table.scatter_add(tf.IndexedSlices(updates, rows))
""", """    def body(i):
        table.assign(table * 0.5)
        table.scatter_add(tf.IndexedSlices(updates, rows))
        return i + 1

    tf.while_loop(lambda i: i < 2, body, (tf.constant(0),))
""")

NOISE_IN_BRANCH_IN_LOOP = """
v = tf.Variable(tf.zeros([64]), name="v")


@tf.function(jit_compile={jit}, input_signature={signature})
def step(x):
    def body(i, s):
        v.assign_add(x)
        logits = tf.reshape(v[:tf.size(x)] * tf.cast(i, tf.float32), [1, -1]) / 512.0
        drawn = lambda: x * tf.cast(tf.random.categorical(logits, 64, name="noise")[0], tf.float32)
        noisy = tf.cond(i > 1, drawn, lambda: v * 2.0)
        return i + 1, s + tf.reduce_sum(noisy)
    _, total = tf.while_loop(lambda i, s: i < 4, body, (tf.constant(0), tf.constant(0.0)))
    return total


inputs = (tf.range(1.0, 65.0),)
"""


probed = steps._probed


def noise_in_branch_in_loop(jit: bool = False, batch: int | None = 64) -> str:
    """The step, traced for `batch` elements (None: any number, the shapes inside left open, as Keras traces)."""
    return NOISE_IN_BRANCH_IN_LOOP.format(jit=jit, signature=f"[tf.TensorSpec([{batch}], tf.float32)]")


@pytest.mark.parametrize("jit, batch, rank", [(False, 64, True), (True, 64, True), (True, None, True),
                                              (True, None, False)],
                         ids=["no XLA", "XLA", "XLA, the batch dimension left open", "XLA, a rank left open"])
def test_a_source_in_a_branch_inside_a_loop_is_replayed_on_the_inputs_of_its_first_execution(run_step, monkeypatch,
                                                                                             jit, batch, rank):
    probes = []
    monkeypatch.setattr(steps, "_probed", lambda *a: probes.append(1) or probed(*a))
    if not rank:  # planted: no shape to start its slot from, even after a probe; the host takes it, without XLA
        monkeypatch.setattr(BodyValues, "shape", lambda self, slot: (_ for _ in ()).throw(UnfixedShape(slot)))
    t = run_step(noise_in_branch_in_loop(jit, batch), runs=3, replay_runs=5)
    assert t.record.meta.jit_compile == jit and len(probes) == (jit and batch is None)
    row = t.csv.iloc[0]
    assert row["region"] == "while/body::while/cond/then_branch" and row["kind"] == "random"
    assert (row["replay_runs"], row["replay_distinct"]) == (5, 5)
    assert row["reproducer"] == "repro/1_Multinomial.py"  # conftest ran it in a fresh process: it exited 1
    saved = np.load(t.csv_path.parent / "repro" / "1_Multinomial.npz")
    # the branch's first execution is the loop's third (i = 2): v is then 3 x, the logits 6 x / 512
    assert saved["in_0"].tolist() == [(6 * np.arange(1, 65) / 512).tolist()]
    source = t.record.sources[0]
    # under XLA its inputs come out of the compiled step, threaded out of the bodies (their shapes first, where
    # tracing left them open); from a run without XLA only where they cannot be, which the replay says; that run
    # computes other numbers than the step does, so the source's magnitude is measured only where it runs as is
    assert (source.replay_note == WITHOUT_XLA) == (jit and not rank)
    if rank:
        assert source.max_abs_diff > 0  # its draws differ between the runs
    else:
        assert source.max_abs_diff is None


def _control_flow_lowering(inst, trace) -> list[bool]:
    """Whether each loop and branch op of an instrumented step (its top level and every body) lowers to
    Switch/Merge, where TensorFlow places each node of its bodies on its own."""
    gd = inst.fn.get_concrete_function(*trace.arg_specs()).graph.as_graph_def()
    library = {f.signature.name: f for f in gd.library.function}
    nodes, seen = list(gd.node), set()
    for n in nodes:  # grows: the nodes of each function called (the library also keeps the bodies replaced)
        called = [a.func.name for a in n.attr.values()] + [f.name for a in n.attr.values() for f in a.list.func]
        for name in set(called) & set(library) - seen:
            seen.add(name)
            nodes.extend(library[name].node_def)
    return [n.attr["_lower_using_switch_merge"].b for n in nodes if n.op in ("If", "StatelessIf", "While",
                                                                            "StatelessWhile")]


def test_the_pass_recording_body_values_of_an_xla_step_lowers_its_loops_and_branches(tmp_path):
    # Where a value cannot be threaded out of an XLA step, a host callback takes it and the pass runs without XLA.
    # Traced for XLA, a loop or branch stays a function run whole on its op's device: on a GPU the callback in it
    # had no kernel (the H200's NotFoundError). So the pass lowers them, as a step traced without XLA is.
    target = load_target(write_script(tmp_path, "model_step", noise_in_branch_in_loop(jit=True)))
    trace = trace_step(target, target.make_inputs())
    noise = next(op for op in trace.graph.ops if op.endswith("noise/Multinomial"))
    fp = fingerprint.WeightedSumFingerprinter()
    under_xla = _control_flow_lowering(capture.build(trace, [], fp, descend=True), trace)
    recording = _control_flow_lowering(
        capture.build(trace, [], fp, descend=True, values=BodyValues([f"{noise}:0@0"])), trace)
    assert len(under_xla) == len(recording) == 2  # the loop and the branch in it
    assert not any(under_xla) and all(recording)


def test_a_write_in_a_loop_body_is_replayed_from_the_state_the_write_before_it_left_there(run_step):
    t = until_it_fires(lambda: run_step(SCATTER_IN_LOOP, runs=6, replay_runs=10))
    row = t.row("while/body::while/ResourceScatterAdd")
    assert row["kind"] == "write" and row["replay_runs"] == 10
    saved = np.load(t.csv_path.parent / row["reproducer"].replace(".py", ".npz"))
    # the table at the body's execution where the write first differed, after its assign (not the snapshot's ones):
    # at the first, ones halved; on a loaded machine the race fired first at the second (the whole suite beside two
    # busy loops, 2026-12-06), whose table holds the first execution's sums, halved again
    rng = np.random.default_rng(1)  # the script's updates and rows
    updates, rows = rng.standard_normal((32768, 64)).astype(np.float32), rng.integers(0, 4, 32768)
    sums = np.zeros((4, 64))
    np.add.at(sums, rows, updates.astype(np.float64))
    table = np.ones((4, 64))
    for _ in range(int(row["iteration"])):
        table = table * 0.5 + sums
    assert saved["state_0"].shape == (4, 64)
    if int(row["iteration"]) == 0:
        assert (saved["state_0"] == 0.5).all()
    np.testing.assert_allclose(saved["state_0"], table * 0.5, rtol=1e-5, atol=1e-3)


def test_under_xla_the_state_a_write_in_a_loop_starts_from_is_threaded_out_at_each_execution_asked(tmp_path):
    # The write's state before it is read inside the body, where the read carries no shape: the variable's own
    # shape starts its slot. The step stays compiled (threaded), and each execution gets its own state.
    source = SCATTER_IN_LOOP.replace("@tf.function\n", "@tf.function(jit_compile=True)\n")
    target = load_target(write_script(tmp_path, "model_step", source))
    args = target.make_inputs()
    trace = trace_step(target, args)
    write = next(op for op in trace.graph.ops if op.endswith("ResourceScatterAdd"))
    values = BodyValues([f"{write}:pre0@0", f"{write}:pre0@1"], threaded=True)
    capture.build(trace, [], fingerprint.WeightedSumFingerprinter(), descend=True, values=values)(args)
    updates, rows = (a.numpy() for a in args)
    first = np.full([4, 64], 0.5, np.float32)  # ones halved
    second = first.copy()
    np.add.at(second, rows, updates)
    taken = values.runs[-1]
    assert trace.jit_compile and (taken[f"{write}:pre0@0"] == first).all()
    np.testing.assert_allclose(taken[f"{write}:pre0@1"], second * 0.5, rtol=1e-4, atol=1e-3)


def test_a_keras_mixed_precision_step_under_xla_threads_out_the_scatter_inputs_at_the_shapes_a_probe_saw(tmp_path):
    # Keras traces the batch dimension open, and a variable read inside the loss-scale branch has no shape at all:
    # the learning rate times the gradient has no rank where traced. A first run threads out each value's shape.
    source = (ROOT / "examples" / "mixed_precision_fit.py").read_text().replace(
        "from_logits=True))", "from_logits=True), jit_compile=True)")
    script = write_script(tmp_path, "mixed_xla", source)
    with importable(script):  # the script sets Keras' global policy: put back after
        target = load_target(script)
        args = target.make_inputs()
        trace = trace_step(target, args)
        write = next(op for op in trace.graph.ops if op.endswith("ResourceScatterSub"))
        inputs = trace.graph.data_inputs(write)
        wanted = {"ids": next(t for t in inputs if trace.graph.dtype(t) == "int32"),
                  "updates": next(t for t in inputs if trace.graph.dtype(t) == "float32"),
                  "table": f"{write}:pre0"}
        wanted = {k: f"{t}@0" for k, t in wanted.items()}
        fp = fingerprint.WeightedSumFingerprinter()
        with pytest.raises(UnfixedShape):  # the slots cannot start from the traced shapes
            capture.build(trace, [], fp, descend=True, values=BodyValues(list(wanted.values()), threaded=True))
        probe = BodyValues(list(wanted.values()), probe=True)
        capture.build(trace, [], fp, descend=True, values=probe)(args)
        known = probe.probed()
        assert [known[wanted[k]] for k in ("ids", "updates", "table")] == [[2048 * 16], [2048 * 16, 64], [1000, 64]]
        table = target.module.model.layers[0].embeddings.numpy()
        values = BodyValues(list(wanted.values()), threaded=True, known=known)
        capture.build(trace, [], fp, descend=True, values=values)(args)
        taken = values.runs[-1]
        assert (taken[wanted["table"]] == table).all()  # the table as this run found it, before its update
        assert (taken[wanted["ids"]] == args[0].numpy().reshape(-1)).all()  # the batch's token ids, looked up


def test_where_recording_a_bodys_values_fails_its_source_is_not_replayed_and_the_verdict_stands(run_step,
                                                                                                monkeypatch):
    def failing(self, region, index, tensors):  # the host callback raises: the pass fails at run time
        tf.numpy_function(lambda *_: 1 / 0, [index], tf.float64, stateful=True)

    monkeypatch.setattr(BodyValues, "take", failing)
    t = run_step(noise_in_branch_in_loop(), runs=3, replay_runs=5)
    assert t.code == 1 and t.sources == ["while/body::while/cond/then_branch::while/cond/noise/Multinomial"]
    source = t.record.sources[0]
    assert source.replay_runs is None and not source.reproducer
    assert source.replay_note.startswith("not replayed alone: recording its inputs inside the body failed")
