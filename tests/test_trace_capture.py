"""Tracing (inlining, resource edges, check) and capture (fingerprints, state reads) on small real steps."""

from __future__ import annotations

import os
import traceback
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from opbisect import tfcompat
from opbisect.capture import builder, fingerprint
from opbisect.capture import taps as capture
from opbisect.errors import GraphCheckError
from opbisect.execute.preflight import graph_findings
from opbisect.ir.graph import OpGraph
from opbisect.targets.loader import load_target
from opbisect.trace.trace import pick_sites, tensor_layout, trace_step

from conftest import write_script

NESTED = """
v = tf.Variable(tf.zeros([3]), name="v")


@tf.function
def inner(a):
    v.assign_add(a)
    return tf.reduce_sum(a * a, name="sq")


@tf.function
def step(x):
    s = inner(x + 1.0)
    return s * 2.0


inputs = (tf.constant([1.0, 2.0, 3.0]),)
"""


def traced(tmp_path, body):
    target = load_target(write_script(tmp_path, "model_step", body))
    args = target.make_inputs()
    return trace_step(target, args), args


def every_tensor(trace) -> list[str]:
    """Every tensor worth tapping, element-wise outputs too (--tap-every-tensor)."""
    return builder.tappable_tensors(builder.every_tensor_tapped(trace))[0]


PLANTED = """
table = tf.Variable(tf.ones([4, 8]), name="table")


def noise(x):
    return x + np.random.default_rng().standard_normal(x.shape).astype(np.float32)  # unseeded: the source


@tf.function
def step(x):
    y = tf.reshape(tf.numpy_function(noise, [x], tf.float32), [4, 8])
    z = tf.nn.relu(y * 2.0 + 1.0)  # element-wise after the source
    w = tf.matmul(z, table.read_value(), transpose_b=True)
    table.assign_add(tf.reduce_mean(w) * tf.ones([4, 8]))
    quiet = tf.cast(tf.shape(x)[0], tf.float32) * tf.reduce_sum(table.read_value())  # reads the write
    return tf.reduce_sum(tf.math.add_n([w, w, tf.matmul(z, z, transpose_b=True)])) + quiet


inputs = (tf.ones([4, 8]),)
"""


def test_tap_every_tensor_counts_every_tap_when_the_cpu_digest_is_chosen(tmp_path, monkeypatch):
    # A CPU step takes the fused op from FUSED_ON_CPU_FROM_TAPS taps: with --tap-every-tensor the count is of every
    # tensor, not of the lean taps (a step between the two counts took farmhash with every tensor tapped).
    from opbisect.execute.prepared import prepare
    from opbisect.settings import TraceSettings
    from opbisect.targets.loader import importable

    trace, _ = traced(tmp_path, PLANTED)
    lean, full = len(builder.tappable_tensors(trace)[0]), len(every_tensor(trace))
    assert lean < full
    monkeypatch.setattr(fingerprint, "FUSED_ON_CPU_FROM_TAPS", full)
    path = tmp_path / "model_step.py"
    with importable(path):
        chosen = {every: prepare(TraceSettings(script=path, device="cpu", tap_every=every)).fingerprinter.key
                  for every in (False, True)}
    assert chosen == {False: "farmhash", True: "fused"}


def test_element_wise_outputs_left_untapped_give_the_sources_every_tensor_tapped_gives(tmp_path):
    # What lean taps rest on: an element-wise op's inputs fix its output, so compare derives whether it differs
    # from what feeds it. Fingerprints of every tensor, compared whole and with the element-wise ones left out:
    # the same sources, each with the same differing ops after it and the same reach to the step's result.
    from opbisect.analysis.compare import compare
    from opbisect.execute.experiment import result_tensors

    trace, args = traced(tmp_path, PLANTED)
    every, lean = every_tensor(trace), builder.tappable_tensors(trace)[0]
    types = {trace.graph.op_type(t.split(":")[0]) for t in set(every) - set(lean)}
    assert set(lean) < set(every) and {"Mul", "AddV2", "Relu", "ReadVariableOp", "Cast"} <= types
    assert "AddN" not in types  # outside XLA a large AddN may sum in thread-finish order: tapped
    assert "Shape" not in types and "StridedSlice" not in types  # coarse: a difference may vanish through them
    table, start = trace.variables["table"], trace.variables["table"].numpy().copy()
    inst, fps = capture.build(trace, every, fingerprint.FarmhashFingerprinter()), []
    for _ in range(3):
        table.assign(start)
        fps.append(inst(args)[0].tolist())
    kept = [every.index(t) for t in lean]
    results = result_tensors(trace)
    whole = compare(trace.graph, every, fps, [{}] * 3, results)
    leaner = compare(trace.graph, lean, [[run[i] for i in kept] for run in fps], [{}] * 3, results)
    assert [s.op for s in whole.sources] == ["PyFunc"] and whole.sources[0].affects_result
    assert leaner.sources == whole.sources


@pytest.mark.parametrize("fp", [fingerprint.FarmhashFingerprinter(), fingerprint.WeightedSumFingerprinter()],
                         ids=["farmhash", "wsum"])
def test_fingerprints_are_bitwise_exact_and_see_any_single_element_change(fp):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(1000).astype(np.float32)
    many = tf.function(lambda ts: fp.many(list(ts)))
    base = many([tf.constant(x)]).numpy()[0]
    assert many([tf.constant(x.copy())]).numpy()[0] == base
    for i in (0, 517, 999):
        y = x.copy()
        y[i] = np.nextafter(y[i], np.float32(np.inf))  # one ulp
        assert many([tf.constant(y)]).numpy()[0] != base
    z = x.copy()
    z[[3, 4]] = z[[4, 3]]  # a swap keeps the sum of the bits: position weights must see it
    assert many([tf.constant(z)]).numpy()[0] != base
    # (numpy arrays: eager TF caches scalar constants by value, and -0.0 == 0.0 would hit the cache)
    assert many([tf.constant(np.float32([-0.0]))]).numpy()[0] != many([tf.constant(np.float32([0.0]))]).numpy()[0]
    assert many([tf.zeros([0])]).numpy()[0] != many([tf.zeros([1])]).numpy()[0]
    digests = many([tf.constant(True), tf.constant([1, 2], tf.int64), tf.constant([1.5], tf.bfloat16),
                    tf.constant([1 + 2j], tf.complex128)]).numpy()
    assert len(set(digests.tolist())) == 4


LOOPED = """
@tf.function
def step(x):
    for i in range(3):
        x = tf.multiply(x, 2.0, name=f"twice{i}")
    y = tf.add(x, 1.0, name="plus")
    return tf.subtract(y, 3.0, name="minus")


inputs = (tf.ones([2]),)
"""


def test_ops_made_from_one_stack_share_its_sites_and_every_other_line_gets_its_own(tmp_path):
    """The sites are read once per distinct creation stack: the three ops of one loop line share one, the lines
    after it each get theirs."""
    graph = traced(tmp_path, LOOPED)[0].graph
    sites = {name: graph.site(name) for name in ("twice0", "twice1", "twice2", "plus", "minus")}
    assert sites["twice0"] == sites["twice1"] == sites["twice2"]
    line = int(sites["twice0"].split(":")[1].split()[0])  # the script's header comes first
    assert [sites[n] for n in ("twice0", "plus", "minus")] == [f"model_step.py:{line + k} in step" for k in range(3)]


def test_weighted_sum_does_not_depend_on_summation_order():
    # Integer addition wraps and commutes: a reduction in any order gives the same digest.
    fp = fingerprint.WeightedSumFingerprinter()
    x = tf.constant(np.random.default_rng(1).standard_normal(4096).astype(np.float32))
    digest = tf.function(lambda t: fp.one(t))(x).numpy()
    bits = tf.bitcast(x, tf.int32).numpy().tolist()
    terms = [b * (2 * i + 1) * 0x9E3779B97F4A7C15 for i, b in enumerate(bits)]  # exact Python ints
    for order in (range(4096), reversed(range(4096)), np.random.default_rng(2).permutation(4096)):
        total = 0
        for i in order:
            total = (total + terms[i]) % 2**64  # what wrapping int64 adds do, in this order
        total = (total + 4096 * 0x27D4EB2F165667C5) % 2**64
        assert total - 2**64 * (total >= 2**63) == digest


def test_nested_tf_functions_are_inlined_with_their_creation_sites(tmp_path):
    trace, _ = traced(tmp_path, NESTED)
    graph = trace.graph
    types = {graph.op_type(op) for op in graph.ops}
    assert "StatefulPartitionedCall" not in types and "PartitionedCall" not in types
    inner_ops = [op for op in graph.ops if op.startswith("StatefulPartitionedCall/")]
    assert any(graph.op_type(op) == "AssignAddVariableOp" for op in inner_ops)
    sq = next(op for op in inner_ops if op.endswith("/sq"))
    assert graph.site(sq).startswith("model_step.py:") and "in inner" in graph.site(sq)
    assert graph.data_inputs(sq) and graph_findings(graph) == []


def test_instrumented_nested_step_matches_the_plain_step(tmp_path):
    trace, args = traced(tmp_path, NESTED)
    v = trace.variables["v"]
    start = v.numpy().copy()
    plain = float(trace.concrete(*args))
    after_plain = v.numpy().copy()
    v.assign(start)
    taps, _ = builder.tappable_tensors(trace)
    inst = capture.build(trace, taps, fingerprint.FarmhashFingerprinter(), full=["StatefulPartitionedCall/sq:0"])
    fps, outs, full, _ = inst(args)
    assert float(outs[0]) == plain and np.array_equal(v.numpy(), after_plain)
    assert len(fps) == len(taps) and full[0] == pytest.approx(4 + 9 + 16)


def test_arguments_nested_in_dicts_and_tuples_feed_the_placeholders_tensorflow_feeds(tmp_path):
    trace, args = traced(tmp_path, """
        @tf.function
        def step(batch, scale):
            return batch["b"][0] * scale - batch["a"] + batch["b"][1]


        inputs = ({"b": (tf.constant(2.0), tf.constant(3.0)), "a": tf.constant(5.0)}, tf.constant(7.0))
        """)
    from opbisect import tfcompat

    other = ({"a": tf.constant(1.0), "b": (tf.constant(4.0), tf.constant(6.0))}, tf.constant(0.5))
    for call in (args, args, other):  # the first call checks the layout against TensorFlow's binding; then tf.nest
        assert trace.flat_args(call) == tfcompat.flat_call_args(trace.concrete, call)
    assert len(trace.flattens_plainly) == 1
    python_scale = (other[0], 0.5)  # a Python number in the layout: TensorFlow's binding, always
    assert tensor_layout(python_scale) is None


def test_under_xla_the_taps_digested_together_after_the_import_are_each_taps_own_digest(tmp_path):
    import dataclasses

    trace, args = traced(tmp_path, NESTED.replace("@tf.function\ndef step", "@tf.function(jit_compile=True)\ndef step"))
    assert trace.jit_compile
    v, start = trace.variables["v"], trace.variables["v"].numpy().copy()
    taps = every_tensor(trace)  # the fused ones too
    fp = fingerprint.WeightedSumFingerprinter()
    grouped = capture.build(trace, taps, fp)
    stamped = capture.build(dataclasses.replace(trace, jit_compile=False), taps, fp)  # a digest node per tap
    digests = []
    for inst in (grouped, stamped):
        v.assign(start)
        digests.append(inst(args)[0].tolist())
    assert len(digests[0]) == len(taps) > 5 and digests[0] == digests[1]
    nodes = [[n.name for n in inst.fn.get_concrete_function(*trace.arg_specs()).graph.as_graph_def().node]
             for inst in (grouped, stamped)]
    stamped_here = [sum(f"{builder.PREFIX}/tap/" in name for name in names) for names in nodes]
    assert stamped_here[0] == 0 and stamped_here[1] >= len(taps)  # grouped: no digest node stamped next to a tap


def test_state_after_each_write_is_read_before_the_next_write(tmp_path):
    trace, args = traced(tmp_path, """
        c = tf.Variable(1.0, name="c")


        @tf.function
        def step(x):
            c.assign(c * 2.0)
            c.assign_add(x)
            c.assign(c * 10.0)
            return c.read_value()


        inputs = (tf.constant(3.0),)
        """)
    graph = trace.graph
    writes = [op for op in graph.topo_order() if graph.written(op)]
    assert len(writes) == 3
    states = [f"{w}:res0" for w in writes]
    inst = capture.build(trace, [], fingerprint.FarmhashFingerprinter(), full=states)
    _, outs, full, _ = inst(args)
    assert [float(f) for f in full] == [2.0, 5.0, 50.0] and float(outs[0]) == 50.0
    assert graph.prior_writes(writes[2], "c") == writes[:2]


def test_variables_are_keyed_by_name_not_by_order(tmp_path):
    trace, _ = traced(tmp_path, """
        a = tf.Variable(1.0, name="same")
        b = tf.Variable(2.0, name="same")
        z = tf.Variable(3.0, name="alpha")


        @tf.function
        def step():
            return b + a + z


        inputs = ()
        """)
    assert sorted(trace.variables) == ["alpha", "same", "same#2"]


def test_check_refuses_a_graph_with_a_cycle_and_notes_opaque_control_flow():
    g = OpGraph()
    g.add_op("a", type="While", outputs=[("float32", "()")])
    g.add_op("b", type="Neg", outputs=[("float32", "()")])
    g.add_data_edge("a", 0, "b", 0)
    notes = graph_findings(g)
    assert len(notes) == 1 and notes[0].level == "note" and "1 While kept opaque" in notes[0].message
    g.add_data_edge("b", 0, "a", 0)
    with pytest.raises(GraphCheckError, match="cycle"):
        graph_findings(g)


def test_graph_round_trips_through_json(tmp_path):
    trace, _ = traced(tmp_path, NESTED)
    again = OpGraph.from_json(trace.graph.to_json())
    assert again.ops == trace.graph.ops
    assert [again.resources(op) for op in again.ops] == [trace.graph.resources(op) for op in trace.graph.ops]
    assert again.position == trace.graph.position


@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 70])
def test_any_number_of_taps_packs_into_one_vector_in_tap_order(tmp_path, n):
    trace, args = traced(tmp_path, """
        @tf.function
        def step(x):
            for i in range(40):
                x = tf.sin(x) * float(i + 1)
            return x


        inputs = (tf.constant([0.5, 0.25]),)
        """)
    taps, _ = builder.tappable_tensors(trace)
    chosen = (taps * 2)[:n]  # the same tensor may be tapped twice
    fp = fingerprint.FarmhashFingerprinter()
    fps, _, full, _ = capture.build(trace, chosen, fp, full=chosen)(args)
    one = tf.function(lambda ts: fp.many(list(ts)))
    expected = one([tf.constant(a) for a in full]).numpy() if n else np.zeros(0, np.int64)
    assert fps.shape == (n,) and np.array_equal(fps, expected)


@pytest.mark.parametrize("jit", [False, True], ids=["graph", "xla"])
def test_weighted_sums_grouped_by_size_are_each_tensors_own_digest(jit):
    fp = fingerprint.WeightedSumFingerprinter()
    rng = np.random.default_rng(3)
    tensors = [tf.constant(rng.standard_normal((4, 8)).astype(np.float32)) for _ in range(3)] + [
        tf.constant(rng.integers(-9, 9, 32), tf.int32), tf.constant(rng.standard_normal(32).astype(np.float32)),
        tf.constant(rng.standard_normal((4, 8)).astype(np.float16)), tf.constant(rng.random((4, 8)) > 0.5),
        tf.zeros([0, 3]), tf.constant(rng.standard_normal((2, 16))), tf.constant(2.5), tf.constant(-1.25),
        tf.constant([[1, -2]], tf.int8), tf.zeros([0, 3]), tf.constant([1 + 2j, 3 - 1j], tf.complex128),
        tf.constant([[0.5 - 1j], [2j]], tf.complex64)]
    one = tf.function(fp.one, jit_compile=jit)
    each = [int(one(t)) for t in tensors]
    assert len(set(each)) == len(tensors) - 1  # the two empty tensors: one digest
    assert tf.function(lambda ts: fp.many(list(ts)), jit_compile=jit)(tensors).numpy().tolist() == each
    # a tensor whose size is known only when it runs keeps a reduction of its own
    mixed = tf.function(lambda a, b, c: fp.many([a, b, c]), input_signature=[
        tf.TensorSpec([None], tf.float32), tf.TensorSpec([32], tf.float32), tf.TensorSpec([32], tf.int32)])
    assert mixed(tensors[4], tensors[4], tensors[3]).numpy().tolist() == [each[4], each[4], each[3]]


def test_fused_op_computes_the_weighted_sum_definition_on_every_dtype():
    fused, note = fingerprint.for_device("cpu", choice="fused")  # builds the op's CPU kernel here
    assert fused.fused and note == ""
    size = fingerprint.FUSED_ON_CPU_FROM_TAPS  # the default on a CPU: farmhash under this many taps, then the op
    assert fingerprint.for_device("cpu", taps=size - 1)[0].key == "farmhash"
    assert fingerprint.for_device("cpu", taps=size)[0].key == "fused"
    rng = np.random.default_rng(0)
    tensors = [tf.constant(rng.standard_normal(20000).astype(np.float32)), tf.constant(np.uint8([200, 3])),
               tf.constant([True, False]), tf.constant(rng.standard_normal(7), tf.bfloat16),
               tf.constant(np.arange(5, dtype=np.int64) - 2), tf.constant([1 + 2j, 3 - 1j], tf.complex128),
               tf.constant([1 + 2j], tf.complex64), tf.zeros([0, 3]), tf.constant(np.float16([1.5, -2])),
               tf.constant(np.uint64([2**63 + 5])), tf.constant(rng.standard_normal((3, 5))),
               # several of the CPU kernel's pieces (65,536 words each), the last one partial, read on several threads
               tf.constant(rng.standard_normal(3 * 65536 + 7).astype(np.float32)),
               tf.constant(rng.integers(-128, 128, 2 * 65536 + 3).astype(np.int8))]
    reference = tf.function(lambda ts: fingerprint.WeightedSumFingerprinter().many(list(ts)))(tensors).numpy()
    assert np.array_equal(fused.many(tensors).numpy(), reference)


@pytest.mark.parametrize("host_split", [False, True], ids=["one-family", "int32-on-host"])
def test_fused_capture_returns_digests_in_tap_order(tmp_path, host_split):
    trace, args = traced(tmp_path, """
        @tf.function
        def step(x):
            for i in range(30):
                x = tf.sin(x) * float(i + 1)
                n = tf.shape(x)[0] + i  # int32 taps interleaved with float ones
                x = x + tf.cast(n, tf.float32)
            return x


        inputs = (tf.constant([0.5, 0.25]),)
        """)
    taps = every_tensor(trace)  # int32 taps among float ones
    fused, _ = fingerprint.for_device("cpu", choice="fused")
    fused.host_dtypes = frozenset({"int32"}) if host_split else frozenset()
    fps, _, full, _ = capture.build(trace, taps, fused, full=taps)(args)
    expected = fused.many([tf.constant(a) for a in full]).numpy()
    assert {trace.graph.dtype(t) for t in taps} >= {"int32", "float32"}
    assert np.array_equal(fps, expected)


def test_side_stream_digests_are_awaited_once_per_device_and_equal_the_fused_ones(tmp_path, monkeypatch):
    trace, args = traced(tmp_path, """
        @tf.function
        def step(x):
            for i in range(40):
                x = tf.cos(x) * float(i + 2)
                x = x + tf.cast(tf.shape(x)[0] + i, tf.float32)
            return x


        inputs = (tf.constant([0.75, 0.5, 0.25]),)
        """)
    monkeypatch.setattr(builder, "SIDE_GROUP", 16)  # several groups, so the await takes several vectors
    taps = every_tensor(trace)  # int32 taps among float ones
    fused, _ = fingerprint.for_device("cpu", choice="fused")
    side, _ = fingerprint.for_device("cpu", choice=fingerprint.SIDE_STREAM)
    fused.host_dtypes = side.host_dtypes = frozenset({"int32"})
    graph_def = capture.instrumented_graph_def(trace, side, capture.Wanted(taps))[0].gd
    digests = {n.name: n for n in graph_def.node if n.op == "OpbisectFingerprint"}
    awaits = [n for n in graph_def.node if n.op == "OpbisectAwaitDigests"]
    on_device = sorted(name for name, n in digests.items() if n.attr["side_stream"].b)
    assert len(awaits) == 1 and len(on_device) >= 3 and len(on_device) < len(digests)  # the host's: not awaited
    assert sorted(i.split(":")[0] for i in awaits[0].input) == on_device
    assert sorted(awaits[0].attr["_class"].list.s) == sorted(f"loc:@{n}".encode() for n in on_device)
    assert np.array_equal(capture.build(trace, taps, side)(args)[0], capture.build(trace, taps, fused)(args)[0])
    tensors = [tf.constant([1.0, 2.0]), tf.constant([3, 4]), tf.constant([5.0])]
    assert np.array_equal(side.many(tensors).numpy(), fused.many(tensors).numpy())


def test_fused_many_keeps_order_when_int32_goes_to_the_host():
    fused, _ = fingerprint.for_device("cpu", choice="fused")
    tensors = [tf.constant([1.0, 2.0]), tf.constant([3, 4]), tf.constant([5.0]), tf.constant([7], tf.int64)]
    together = fused.many(tensors).numpy()
    fused.host_dtypes = frozenset({"int32"})
    assert np.array_equal(fused.many(tensors).numpy(), together)


def test_an_ops_site_is_the_users_frame_never_opbisects_console_script():
    def frame(path, line, name):
        return traceback.FrameSummary(path, line, name)

    console = "/venv/bin/opbisect"
    through_keras = [frame(console, 8, "<module>"), frame("/venv/lib/python3.11/site-packages/keras/src/optimizers/"
                                                          "sgd.py", 123, "update_step"),
                     frame("/venv/lib/python3.11/site-packages/tensorflow/python/ops/array_ops.py", 50, "f")]
    # The Keras form: no frame of the user's; the library site names Keras, not the console script.
    assert pick_sites(through_keras, entry=console) == ("", "sgd.py:123 in update_step")
    from_script = [frame(console, 8, "<module>"), frame("/home/me/train.py", 31, "step")] + through_keras[1:]
    assert pick_sites(from_script, entry=console) == ("train.py:31 in step", "sgd.py:123 in update_step")
    # A user's own program that calls opbisect keeps its frames.
    assert pick_sites([frame("/home/me/run.py", 3, "<module>")] + through_keras[1:], entry="/home/me/run.py")[0] \
        == "run.py:3 in <module>"


def test_a_replica_threads_python_frames_are_not_the_users_site():
    import sysconfig
    import threading

    keras_update = traceback.FrameSummary("/venv/lib/python3.11/site-packages/keras/src/optimizers/sgd.py", 123,
                                          "update_step")
    # MirroredStrategy runs each replica's step in a thread: its outermost frame is Python's threading module.
    thread = traceback.FrameSummary(threading.__file__, 1073, "_bootstrap_inner")
    assert pick_sites([thread, keras_update]) == ("", "sgd.py:123 in update_step")
    other = traceback.FrameSummary(str(Path(sysconfig.get_paths()["stdlib"]) / "concurrent" / "futures" / "thread.py"),
                                   59, "run")
    assert pick_sites([other]) == ("", "thread.py:59 in run")  # no frame outside Python's: the library site only


def test_opbisects_own_frames_are_never_the_users_and_a_users_examples_folder_is_theirs():
    import opbisect

    def frame(path, line, name):
        return traceback.FrameSummary(path, line, name)

    ours = frame(str(Path(opbisect.__file__).parent / "session.py"), 120, "experiment")
    users = frame("/home/me/examples/train.py", 31, "step")
    assert pick_sites([ours, users]) == ("train.py:31 in step", "train.py:31 in step")
    assert pick_sites([users, ours])[0] == "train.py:31 in step"  # opbisect's frame is skipped, wherever it is


def test_tracing_leaves_no_global_state_behind(tmp_path):
    import sys

    from conftest import trace

    path_before, options_before = list(sys.path), tf.config.optimizer.get_experimental_options()
    modules_before = set(sys.modules)
    tf.config.optimizer.set_experimental_options({"remapping": False})  # the user's own choice survives
    try:
        trace(write_script(tmp_path, "hygiene", NESTED), tmp_path / "r", runs=2)
        assert sys.path == path_before
        assert "opbisect_target_hygiene" not in sys.modules and set(sys.modules) - modules_before <= {
            m for m in sys.modules if not m.startswith("opbisect_target_")}
        assert tf.config.optimizer.get_experimental_options() == {**options_before, "remapping": False}
    finally:
        tf.config.optimizer.set_experimental_options({"remapping": True})  # TensorFlow's default again


def test_the_console_script_is_ours_however_its_path_is_spelled(tmp_path, monkeypatch):
    script = tmp_path / "bin" / "opbisect"
    script.parent.mkdir()
    script.write_text("")
    monkeypatch.chdir(tmp_path)
    frames = [traceback.FrameSummary(str(script), 8, "<module>"),
              traceback.FrameSummary("/venv/lib/site-packages/keras/src/optimizers/sgd.py", 123, "update_step")]
    assert pick_sites(frames, entry="bin/opbisect") == ("", "sgd.py:123 in update_step")


def test_a_keras_lstm_loop_uses_only_state_opbisect_restores(tmp_path):
    from conftest import trace

    script = write_script(tmp_path, "lstm", """
        import keras

        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((5,), dtype="int32"), keras.layers.Embedding(20, 4),
                                  keras.layers.LSTM(3), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        data = (np.arange(40, dtype=np.int32).reshape(8, 5) % 20, np.ones((8, 1), np.float32))
        """)
    t = trace(script, tmp_path / "r", runs=2)
    graph = OpGraph.from_json(t.record.graph)
    assert any(graph.op_type(op).endswith("While") for op in graph.ops)
    assert not [f for f in t.record.findings if "cannot restore" in f.message]


def test_an_error_raised_inside_a_keras_layer_is_summed_up_by_its_own_message(tmp_path):
    """Keras wraps an error in a layer's call in "Exception encountered when calling X.call()" and the layer's
    arguments; the user needs the error itself."""
    from opbisect.errors import TargetError

    script = tmp_path / "model_step.py"
    script.write_text("""
import keras
import tensorflow as tf


class Broken(keras.layers.Layer):
    def call(self, x):
        return x + self.no_such_weight


model = keras.Sequential([keras.Input((4,)), Broken(), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
data = (tf.ones([2, 4]), tf.ones([2, 1]))
""")
    with pytest.raises(TargetError) as raised:
        load_target(script)
    assert "'Broken' object has no attribute 'no_such_weight'" in str(raised.value)


def test_where_the_fused_op_cannot_be_built_a_gpu_falls_back_to_the_weighted_sum_once_and_says_so(monkeypatch,
                                                                                                  tmp_path, request):
    from opbisect import kernels
    from opbisect.capture import fingerprint

    monkeypatch.setenv("OPBISECT_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "no-compiler-here"))
    monkeypatch.setattr(kernels, "cuda_home", lambda: None)
    kernels._module.cache_clear()  # a library loaded earlier in this process (TensorFlow keeps it loaded)
    request.addfinalizer(kernels._module.cache_clear)
    fp, note = fingerprint.for_device("gpu")
    assert fp.key == "wsum" and "could not be built" in note
    fp, note = fingerprint.for_device("cpu", taps=fingerprint.FUSED_ON_CPU_FROM_TAPS)  # a large step on a CPU
    assert fp.key == "farmhash" and "could not be built" in note
    with pytest.raises(kernels.BuildError):
        fingerprint.for_device("cpu", choice="fused")  # no g++ on this PATH: the CPU build fails, and says so
    remembered = list(tmp_path.glob("*/build-failed.txt"))
    assert len(remembered) == 2  # one per build (CUDA, CPU): the next run does not try the compiler again
    monkeypatch.setattr(kernels, "_compile", lambda *a: pytest.fail("compiled again"))
    assert fingerprint.for_device("gpu")[0].key == "wsum"
    with pytest.raises(kernels.BuildError):
        fingerprint.for_device("cpu", choice="fused")


def test_the_pinned_options_set_the_memory_optimizer_off_for_every_call_inside_even_after_a_nested_change():
    """The memory optimizer and grappler's round count are pinned through the config each tf.function call
    carries (set_experimental_options ignores the keys): they must hold for the calls of the pinned passes, also
    after opbisect's own helpers ran under their options (a nested grappler_options), and be gone afterwards."""
    from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2
    from tensorflow.python.eager import context

    from opbisect.graphdef.importer import UNOPTIMIZED
    from opbisect.settings import PINNED_GRAPPLER
    from opbisect.tfcompat import grappler_options

    def rewrite():
        serialized = context.context().function_call_options.config_proto_serialized
        return config_pb2.ConfigProto.FromString(serialized).graph_options.rewrite_options

    levels = rewriter_config_pb2.RewriterConfig
    off = levels.NO_MEM_OPT
    before = rewrite().memory_optimization, rewrite().meta_optimizer_iterations
    with grappler_options(PINNED_GRAPPLER):
        assert rewrite().memory_optimization == off
        assert rewrite().constant_folding == rewrite().dependency_optimization == levels.OFF
        assert rewrite().meta_optimizer_iterations == levels.ONE  # grappler's second round too (set likewise)
        with grappler_options(UNOPTIMIZED):
            assert rewrite().disable_meta_optimizer
        assert rewrite().memory_optimization == off and not rewrite().disable_meta_optimizer
        assert rewrite().meta_optimizer_iterations == levels.ONE
    assert (rewrite().memory_optimization, rewrite().meta_optimizer_iterations) == before
    assert before[0] != off and before[1] != levels.ONE


def test_a_snapshot_restores_every_value_eagerly_then_through_one_traced_call(monkeypatch):
    from opbisect.execute import snapshot

    monkeypatch.setattr(snapshot, "EAGER_RESTORES", 2)  # restores 1-2 eager, from 3 on the traced function
    variables = {"a": tf.Variable(tf.range(6.0)), "b": tf.Variable([[1, 2], [3, 4]]), "c": tf.Variable(True)}
    saved = {k: v.numpy().copy() for k, v in variables.items()}
    shot = snapshot.Snapshot(variables)
    for done in range(1, 5):
        variables["a"].assign_add(tf.ones(6))
        variables["b"].assign(tf.zeros([2, 2], tf.int32))
        variables["c"].assign(False)
        shot.restore()
        assert all((variables[k].numpy() == saved[k]).all() for k in variables)
        assert (shot._set in snapshot._RESTORERS) == (done > 2)


def test_the_state_fingerprint_is_the_same_eager_and_traced(monkeypatch):
    from opbisect.capture import taps

    fused, _ = fingerprint.for_device("cpu", choice="fused")
    monkeypatch.setattr(taps, "EAGER_STATE_CALLS", 2)  # calls 1-2 eager, from 3 on the traced function
    variables = {f"v{i}": tf.Variable(tf.random.normal([7, 3]) if i % 3 else tf.constant([i, 2, 3])) for i in range(9)}
    variables["flag"] = tf.Variable(True)
    state = taps.make_state_fingerprinter(variables, fused)
    first, second, traced = state(), state(), state()
    assert first == second == traced and len(traced) == 10
    variables["v4"].assign_add(tf.ones([7, 3]))
    changed = state()
    assert [k for k in changed if changed[k] != traced[k]] == ["v4"]


@pytest.mark.parametrize("flags,version,added", [
    (None, "2.21.0", True), ("--xla_dump_to=/tmp/x", "2.21.1", True),  # yours are kept, ours appended
    ("--xla_gpu_force_compilation_parallelism=1", "2.21.0", False),  # you chose: left as it is
    (None, "2.20.0", False), (None, None, False)])  # flags not checked on this TensorFlow could abort XLA
def test_xla_builds_a_steps_kernels_on_every_core_unless_your_flags_say_otherwise(flags, version, added):
    environ = {} if flags is None else {"XLA_FLAGS": flags}
    tfcompat.parallel_xla_compilation(environ, version)
    got = environ.get("XLA_FLAGS", "").split()
    assert got[:len((flags or "").split())] == (flags or "").split()
    want = [f"--xla_gpu_force_compilation_parallelism={os.cpu_count()}",
            "--xla_gpu_enable_llvm_module_compilation_parallelism=true"]
    assert (got[len((flags or "").split()):] == want) == added
    assert added or environ.get("XLA_FLAGS") == flags


def test_the_environment_note_of_an_xla_step_shows_the_xla_flags_it_ran_under(monkeypatch):
    from opbisect.execute.preflight import environment_findings

    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_force_compilation_parallelism=3")
    notes = [[f.message for f in environment_findings(OpGraph(), xla) if "environment" in f.message]
             for xla in (True, False)]
    assert "XLA_FLAGS=--xla_gpu_force_compilation_parallelism=3" in notes[0][0]
    assert "XLA_FLAGS" not in notes[1][0]  # a step without XLA: the flags do not touch it


def test_a_batch_norm_reserve_space_is_not_tapped_and_is_counted_as_workspace(tmp_path):
    """FusedBatchNormV3's reserve_space_3 is cuDNN's workspace on a GPU: its bytes are never compared."""
    trace, _ = traced(tmp_path, """
        scale = tf.Variable(tf.ones([2]), name="scale")


        @tf.function
        def step(x):
            y = tf.raw_ops.FusedBatchNormV3(x=x, scale=scale, offset=tf.zeros([2]), mean=tf.zeros([0]),
                                            variance=tf.zeros([0]), is_training=True, name="bn")
            return tf.reduce_sum(y[0])


        inputs = (tf.ones([4, 3, 3, 2]),)
        """)
    taps, skipped = builder.tappable_tensors(trace)
    assert [t for t in taps if t.startswith("bn:")] == [f"bn:{port}" for port in range(5)]
    assert skipped[builder.WORKSPACE] == 1
