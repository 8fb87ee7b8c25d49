"""The pure stages on literal inputs: source finding, magnitudes, ranking. No TensorFlow."""

from __future__ import annotations

import math

import numpy as np

from opbisect.analysis.compare import compare
from opbisect.analysis.magnitude import of_runs, of_source
from opbisect.analysis.rank import rank
from opbisect.analysis.sources import hidden_behind
from opbisect.ir.graph import OpGraph
from opbisect.record.model import Finding, Source


def chain(*ops: tuple[str, str, list[str]], writes: dict | None = None, reads: dict | None = None) -> OpGraph:
    """ops: (name, type, [input tensor ids]); writes/reads: {op: variable}."""
    g = OpGraph()
    writes, reads = writes or {}, reads or {}
    for name, op_type, _ in ops:
        resources = [(0, writes.get(name) or reads.get(name))] if name in writes or name in reads else []
        outputs = [] if name in writes else [("float32", "(4,)")]
        g.add_op(name, type=op_type, stateful=bool(resources) or op_type == "RandomUniform",
                 outputs=outputs, resources=resources, res_dtypes={"0": "float32"} if name in writes else {})
    for name, _, inputs in ops:
        for slot, tid in enumerate(inputs):
            src, _, idx = tid.rpartition(":")
            g.add_data_edge(src, int(idx), name, slot + 1)
    return g


def test_the_op_whose_inputs_agree_is_the_source_not_what_follows():
    g = chain(("x", "Placeholder", []), ("a", "MatMul", ["x:0"]), ("b", "Sum", ["a:0"]), ("c", "Tanh", ["b:0"]))
    taps = ["x:0", "a:0", "b:0", "c:0"]
    fps = [[1, 2, 3, 4], [1, 2, 9, 8], [1, 2, 3, 4]]  # b varies on identical a; c follows b
    cmp = compare(g, taps, fps, [{}, {}, {}], results=["c:0"])
    assert [(s.op, s.kind, s.runs_differing, s.distinct_values) for s in cmp.sources] == [("b", "op", 1, 2)]
    assert cmp.sources[0].downstream_differing == 1 and cmp.sources[0].affects_result
    assert cmp.differing == ["b:0", "c:0"]


def test_a_write_that_varies_on_identical_inputs_is_a_write_source_and_later_reads_are_not():
    g = chain(("u", "Const", []), ("w", "ResourceScatterSub", ["u:0"]), ("r", "ReadVariableOp", []),
              ("y", "Sum", ["r:0"]), writes={"w": "table"}, reads={"r": "table"})
    g.add_control_edge("w", "r")
    g.add_resource_edges()
    taps = ["u:0", "w:res0", "r:0", "y:0"]
    fps = [[5, 1, 7, 9], [5, 2, 8, 10], [5, 3, 6, 11]]
    before = [{"table": 42}] * 3
    cmp = compare(g, taps, fps, before, results=["y:0", "w:res0"])
    assert [(s.op, s.kind) for s in cmp.sources] == [("w", "write")]
    assert g.prior_writes("r", "table") == ["w"]


def test_a_read_of_state_that_differed_before_the_step_is_a_state_source():
    g = chain(("r", "ReadVariableOp", []), ("y", "Mul", ["r:0"]), reads={"r": "counter"})
    cmp = compare(g, ["r:0", "y:0"], [[1, 2], [3, 4]], [{"counter": 10}, {"counter": 11}])
    assert [(s.op, s.kind) for s in cmp.sources] == [("r", "state")]
    assert cmp.initial_differs == {"counter": True}


def test_random_and_input_ops_get_their_kinds_and_identical_runs_give_no_source():
    g = chain(("it", "IteratorGetNext", []), ("n", "RandomUniform", []), ("s", "AddV2", ["it:0", "n:0"]))
    cmp = compare(g, ["it:0", "n:0", "s:0"], [[1, 2, 3], [4, 5, 6]], [{}, {}])
    assert {s.op: s.kind for s in cmp.sources} == {"it": "input", "n": "random"}
    assert compare(g, ["it:0", "n:0", "s:0"], [[1, 2, 3], [1, 2, 3]], [{}, {}]).sources == []


def test_an_untapped_input_counts_as_differing_only_if_its_producer_saw_a_difference():
    g = chain(("x", "Placeholder", []), ("s", "AsString", ["x:0"]), ("h", "StringToHashBucketFast", ["s:0"]))
    # s (a string) is not tapped; h differs while x does not: h is the source, s is presumed identical.
    cmp = compare(g, ["x:0", "h:0"], [[1, 2], [1, 3]], [{}, {}])
    assert [s.op for s in cmp.sources] == ["h"]
    cmp = compare(g, ["x:0", "h:0"], [[1, 2], [4, 3]], [{}, {}])
    assert [s.op for s in cmp.sources] == ["x"]


def test_magnitude_measures_abs_ulp_and_fraction_across_runs():
    a = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    b = a.copy()
    b[1] = np.nextafter(np.float32(2.0), np.float32(3.0))  # one ulp up
    c = a.copy()
    c[1] = np.nextafter(np.nextafter(np.float32(2.0), np.float32(0)), np.float32(0))  # two ulp down
    m = of_runs([a, b, c])
    assert m.max_ulp_diff == 3 and m.frac_elements_differing == 0.25 and m.elements == 4
    assert math.isclose(m.max_abs_diff, float(b[1]) - float(c[1]))
    assert of_runs([a, a]).max_ulp_diff == 0 and of_runs([a, a]).frac_elements_differing == 0


def test_magnitude_handles_sign_crossing_nan_ints_bools_and_empty():
    assert of_runs([np.float32([-0.0]), np.float32([0.0])]).max_ulp_diff == 0  # differ in bits, not in value
    assert of_runs([np.float32([-0.0]), np.float32([0.0])]).frac_elements_differing == 1.0
    tiny = np.float32(1e-45)  # the smallest subnormal: one ulp either side of zero
    assert of_runs([np.float32([-tiny]), np.float32([tiny])]).max_ulp_diff == 2
    assert math.isinf(of_runs([np.float32([np.nan, 1]), np.float32([1, 1])]).max_abs_diff)
    assert of_runs([np.int32([3, 5]), np.int32([3, 9])]).max_ulp_diff == 4
    assert of_runs([np.array([True]), np.array([False])]).max_abs_diff == 1
    assert of_runs([np.zeros(0, np.float32)] * 2).elements == 0
    both = of_source([[np.float32([1, 1]), np.float32([1, 2])], [np.float32([0] * 6)] * 2])
    assert both.frac_elements_differing == 1 / 8 and both.elements == 8


def _source(op_name, **fields) -> Source:
    base = dict(rank=0, op_name=op_name, op_type="Op", kind="op", first_step=1, region="", iteration=None,
                seen_across="runs",
                runs_differing=1, runs=4, distinct_values=2, downstream_differing=0, affects_result=True,
                max_abs_diff=None, max_ulp_diff=None, frac_elements_differing=None, source_location="",
                known_remedy="", observer_effect=False)
    return Source(**{**base, **fields})


def test_ranking_rule_puts_result_reaching_then_earliest_then_widest_then_largest_first():
    rows = [
        _source("step_two", affects_result=True, downstream_differing=900, frac_elements_differing=1.0,
                max_ulp_diff=1e9, position=0, first_step=2),
        _source("late_big", affects_result=True, downstream_differing=50, frac_elements_differing=0.5,
                max_ulp_diff=100.0, position=90),
        _source("harmless", affects_result=False, downstream_differing=500, frac_elements_differing=1.0,
                max_ulp_diff=1e6, position=1),
        _source("early_small", affects_result=True, downstream_differing=50, frac_elements_differing=0.5,
                max_ulp_diff=100.0, position=10),
        _source("wide", affects_result=True, downstream_differing=80, frac_elements_differing=0.01,
                max_ulp_diff=1.0, position=50),
        _source("more_elements", affects_result=True, downstream_differing=50, frac_elements_differing=0.9,
                max_ulp_diff=1.0, position=95),
        _source("unmeasured", affects_result=True, downstream_differing=50, position=0),  # across processes
    ]
    ranked = rank(rows)
    assert [s.op_name for s in ranked] == ["wide", "more_elements", "early_small", "late_big", "unmeasured",
                                           "step_two", "harmless"]
    assert [s.rank for s in ranked] == [1, 2, 3, 4, 5, 6, 7]
    assert rank([]) == []


def test_a_patchable_source_whose_difference_spreads_points_to_a_trace_with_it_patched():
    xent = _source("loss/xent", op_type="SparseSoftmaxCrossEntropyWithLogits", downstream_differing=3106)
    scatter = _source("sgd/scatter", op_type="ResourceScatterSub", kind="write", downstream_differing=0)
    noise = _source("noise", op_type="RandomUniform", kind="random", downstream_differing=40)
    other = Finding("warning", "something else")
    [kept, note] = hidden_behind([other], [xent, scatter, noise], "step.py", "r/step/sources.csv")
    assert kept == other and note.level == "note" and note.message.startswith("3106 op(s) after loss/xent")
    assert "`opbisect trace step.py --patch r/step/sources.csv`" in note.message
    # a child process's note (naming its temporary folder) is replaced, not repeated
    [again] = hidden_behind([note], [xent], "step.py", "out/step/sources.csv")
    assert "--patch out/step/sources.csv`" in again.message and "r/step" not in again.message
    assert hidden_behind([], [scatter, noise], "step.py", "r/step/sources.csv") == []  # nothing a patch uncovers


def test_a_spreading_source_only_a_family_switch_fixes_puts_the_switch_in_the_command():
    """ResNet50 on the H200: MaxPoolGrad (no rewrite; TF_CUDNN_DETERMINISTIC fixes it) hid the first conv's
    BiasAddGrad; a next trace without the switch would name MaxPoolGrad again."""
    pool = _source("grad/MaxPoolGrad", op_type="MaxPoolGrad", downstream_differing=325)
    bias = _source("grad/BiasAddGrad", op_type="BiasAddGrad", downstream_differing=289)
    [note] = hidden_behind([], [pool, bias], "step.py", "r/a.csv,r/b.csv")
    assert note.message.startswith("325 op(s) after grad/MaxPoolGrad")
    assert "`TF_CUDNN_DETERMINISTIC=1 opbisect trace step.py --patch r/a.csv,r/b.csv`" in note.message
    # set for this trace already (the sources it found are what the switch left): kept for the next one
    [note] = hidden_behind([], [bias], "step.py", "r/c.csv", switches_on=["TF_CUDNN_DETERMINISTIC"])
    assert "`TF_CUDNN_DETERMINISTIC=1 opbisect trace step.py --patch r/c.csv`" in note.message
    [note] = hidden_behind([], [bias], "step.py", "r/c.csv")
    assert "`opbisect trace step.py --patch r/c.csv`" in note.message


def test_the_replica_of_an_op_follows_its_device_where_keras_marks_only_replicas_after_the_first():
    """MirroredStrategy under Keras: replica 1's ops are `gradient_tape/replica_1/...` on the second device, replica
    0's carry no mark (and other layer numbers), the per-device optimizer updates none either."""
    from opbisect.analysis.sources import replica_of

    g = OpGraph()
    placed = {"gradient_tape/functional_1/dense_1_1/BiasAddGrad": "GPU:0",
              "gradient_tape/replica_1/functional_1/dense_1_2/BiasAddGrad": "GPU:1",
              "adam/update_0/UnsortedSegmentSum": "GPU:0", "adam/update_1/UnsortedSegmentSum": "GPU:1",
              "Identity": "CPU:0", "loss/Const": ""}
    for op, device in placed.items():
        g.add_op(op, type="X", device=f"/job:localhost/replica:0/task:0/device:{device}" if device else "")
    assert [replica_of(g, op) for op in placed] == [0, 1, 0, 1, None, None]
    plain = OpGraph()
    plain.add_op("dense/BiasAddGrad", type="X", device="/job:localhost/replica:0/task:0/device:GPU:0")
    assert replica_of(plain, "dense/BiasAddGrad") is None  # no strategy


def test_a_collective_that_differs_on_identical_inputs_is_a_collective_source():
    g = chain(("x0", "Placeholder", []), ("x1", "Placeholder", []),
              ("allreduce", "CollectiveReduceV2", ["x0:0", "x1:0"]), ("y", "Mul", ["allreduce:0"]))
    fps = [[1, 2, 3, 4], [1, 2, 5, 6], [1, 2, 3, 4]]  # both replicas' inputs agree in every run; the sum does not
    cmp = compare(g, ["x0:0", "x1:0", "allreduce:0", "y:0"], fps, [{}, {}, {}], results=["y:0"])
    assert [(s.op, s.kind, s.runs_differing) for s in cmp.sources] == [("allreduce", "collective", 1)]


def test_a_collective_whose_inputs_differ_is_not_a_source():
    g = chain(("x0", "Placeholder", []), ("n", "RandomUniform", []), ("x1", "Add", ["x0:0", "n:0"]),
              ("allreduce", "CollectiveReduceV2", ["x0:0", "x1:0"]))
    fps = [[1, 7, 2, 3], [1, 8, 9, 5], [1, 7, 2, 3]]
    cmp = compare(g, ["x0:0", "n:0", "x1:0", "allreduce:0"], fps, [{}, {}, {}], results=["allreduce:0"])
    assert [(s.op, s.kind) for s in cmp.sources] == [("n", "random")]


def test_an_untapped_identity_n_passes_on_only_the_differences_of_the_input_at_each_port():
    # Keras' optimizers pass every gradient through one IdentityN: left untapped, its output k differs where its
    # input k does, not wherever any of its inputs does (which would hide a source after an unchanged gradient).
    g = chain(("x", "Placeholder", []), ("a", "Sum", ["x:0"]), ("b", "Sum", ["x:0"]), ("n", "IdentityN", []),
              ("u", "BiasAddGrad", []))
    g.attrs("n")["outputs"] = [("float32", "(4,)"), ("float32", "(4,)")]
    g.add_data_edge("a", 0, "n", 1)
    g.add_data_edge("b", 0, "n", 2)
    g.add_data_edge("n", 1, "u", 1)  # u reads b's port, which agrees in every run
    taps = ["x:0", "a:0", "b:0", "u:0"]  # n untapped, as capture leaves it
    fps = [[1, 2, 3, 4], [1, 5, 3, 6], [1, 7, 3, 4]]  # a varies on identical x, and so does u on identical b
    cmp = compare(g, taps, fps, [{}, {}, {}])
    assert sorted(s.op for s in cmp.sources) == ["a", "u"]
