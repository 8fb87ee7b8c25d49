"""Pre-flight checks: causes of nondeterminism visible before any op is compared. Each is a Finding that says
how to fix it: unseeded stateful random ops, the input pipeline (tf.data), and the environment.
(Initial variables and batches across processes are compared in opbisect.processes.)"""

from __future__ import annotations

import os
import sys

import networkx as nx

from .. import tfcompat
from ..errors import GraphCheckError
from ..ir import optypes
from ..ir.graph import OPAQUE_STATE, OpGraph
from ..ir.ids import TensorRef
from ..patches.registry import CUDNN_SWITCH, switch_on
from ..record.model import Finding
from ..words import listed

_STATEFUL_IN_FUNCTIONS = (optypes.with_role(optypes.RANDOM) | optypes.with_role(optypes.PYTHON)
                          | optypes.with_role(optypes.RNG_STATE))


def checks(trace, target) -> list[Finding]:
    found = graph_findings(trace.graph) + unseeded_random_ops(trace.graph)
    if target.dataset is not None:
        found += dataset_findings(target.dataset)
    found += environment_findings(trace.graph, bool(trace.jit_compile))
    found += distribute_findings(trace.graph)
    return found


def graph_findings(graph: OpGraph) -> list[Finding]:
    """Findings about the traced graph itself; raises GraphCheckError when it cannot be analysed. Messages say
    how to fix."""
    _check_usable(graph)
    return _opaque(graph) + _racing_writes(graph) + _unrestorable(graph)


def _check_usable(graph: OpGraph) -> None:
    if not nx.is_directed_acyclic_graph(graph.g):
        cycle = " -> ".join(u for u, _, *_ in nx.find_cycle(graph.g))
        raise GraphCheckError(f"the traced graph has a cycle ({cycle}); this is an opbisect bug: please report it "
                              f"with the script")
    for op in graph.g.nodes:
        for tid in graph.data_inputs(op):
            ref = TensorRef.parse(tid)
            if ref.port >= len(graph.g.nodes[ref.op]["outputs"]):
                raise GraphCheckError(f"op {op} reads {tid}, which {ref.op} does not produce; opbisect bug")


def _opaque(graph: OpGraph) -> list[Finding]:
    """Calls and loop or branch ops whose bodies trace did not enter."""
    opaque: dict[str, int] = {}
    entered = {info["op"] for info in graph.regions.values()}
    for op in graph.g.nodes:
        t = graph.op_type(op)
        if (optypes.has(t, optypes.CONTROL_FLOW) and op not in entered) or optypes.has(t, optypes.CALL):
            opaque[t] = opaque.get(t, 0) + 1
    if not opaque:
        return []
    kinds = ", ".join(f"{n} {t}" for t, n in sorted(opaque.items()))
    why = graph.g.graph.get("opaque_reason", "its body is not visible")
    return [Finding("note", f"{kinds} kept opaque ({why}): a source inside it is reported as that op")]


def _racing_writes(graph: OpGraph) -> list[Finding]:
    """Two writes of one variable with no order between them: the program itself races."""
    by_var: dict[str, list[str]] = {}
    for op in graph.g.nodes:
        for _, var in graph.written(op):
            by_var.setdefault(var, []).append(op)
    found = []
    for var, ws in by_var.items():
        for i, a in enumerate(ws):
            for b in ws[i + 1:]:
                if not (nx.has_path(graph.g, a, b) or nx.has_path(graph.g, b, a) or graph.exclusive(a, b)):
                    found.append(Finding("warning", f"{a} and {b} both write {var} with no order between them: the "
                                                    f"program itself races; order them with tf.control_dependencies"))
    return found


def _unrestorable(graph: OpGraph) -> list[Finding]:
    ops = sorted({op for op in graph.g.nodes if any(v == OPAQUE_STATE for _, v in graph.resources(op))
                  and graph.attrs(op).get("stateful") and not optypes.has(graph.op_type(op), optypes.INPUT)})
    if not ops:
        return []
    return [Finding("warning", f"{len(ops)} ops use state opbisect cannot restore between runs (not a tf.Variable): "
                               f"{listed(ops, 5)}; if they differ they show as kind 'state': keep such state in "
                               f"tf.Variables")]


def unseeded_random_ops(graph) -> list[Finding]:
    ops = [op for op in graph.ops if optypes.has(graph.op_type(op), optypes.RANDOM)
           and not graph.attrs(op).get("seed") and not graph.attrs(op).get("seed2")]
    if not ops:
        return []
    shown = listed(ops)
    return [Finding("warning", f"{len(ops)} stateful random op(s) without a seed ({shown}): they draw differently "
                               f"in every process; call keras.utils.set_random_seed(...) (or tf.random.set_seed) "
                               f"first, or use tf.random.stateless_* with an explicit seed")]


def dataset_findings(dataset) -> list[Finding]:
    """What in a tf.data pipeline makes its batches differ between runs or processes."""
    try:
        graph = tfcompat.dataset_graph_def(dataset)
    except Exception as exc:  # a pipeline that does not serialize (py_function inside): say so, do not guess
        return [Finding("note", f"the tf.data pipeline could not be inspected ({type(exc).__name__})")]
    consts = {n.name: n for n in graph.node if n.op == "Const"}
    stateful_fns = {f.signature.name for f in graph.library.function
                    if any(nd.op in _STATEFUL_IN_FUNCTIONS for nd in f.node_def)}
    found = []
    options = dataset.options()
    if options.deterministic is False:
        found.append(Finding("warning", "input: the pipeline's options set deterministic=False: parallel stages "
                                        "yield elements in the order they finish; remove the option (or set it "
                                        "True)"))
    for node in graph.node:
        if optypes.has(node.op, optypes.PARALLEL_DATASET):
            if node.attr["deterministic"].s == b"false":
                found.append(Finding("warning", f"input: {node.op} runs with deterministic=False: elements come "
                                                f"in the order the parallel calls finish; pass deterministic=True"))
            fn = node.attr["f"].func.name
            if fn in stateful_fns:
                found.append(Finding("warning", f"input: {node.op} calls a function with stateful ops (random or "
                                                f"Python) in parallel: which element gets which draw depends on "
                                                f"timing; use stateless random ops (tf.random.stateless_*)"))
        if optypes.has(node.op, optypes.SHUFFLE_DATASET):
            seeds = [consts.get(s.split(":")[0].lstrip("^")) for s in node.input[2:4]]
            values = [n.attr["value"].tensor.int64_val[:1] for n in seeds if n is not None]
            if len(values) == 2 and all(list(v) == [0] for v in values):
                found.append(Finding("warning", "input: a shuffle has no seed (and no global seed was set): its "
                                                "order differs in every process; pass seed=... or call "
                                                "tf.random.set_seed first"))
            if node.attr["reshuffle_each_iteration"].b:
                found.append(Finding("note", "input: a shuffle reshuffles on every iteration: each epoch (and each "
                                             "re-created iterator) sees another order, reproducible only from the "
                                             "same seed state"))
    return found


def autotuned_convolutions(graph, gpu: bool) -> list[str]:
    """The step's convolutions whose cuDNN algorithms this process picks by timing: on a GPU, with autotuning on
    (TF_CUDNN_USE_AUTOTUNE, on by default) and op determinism off. TF's autotuner takes the first working algorithm
    only under op determinism; TF_CUDNN_DETERMINISTIC drops the nondeterministic ones and still picks the fastest of
    the rest (gpu_utils.cc, BestCudnnConvAlgorithm), so another process may pick others."""
    tuning = os.environ.get("TF_CUDNN_USE_AUTOTUNE", "1").strip().lower() not in ("0", "false")
    if not (gpu and tuning) or tfcompat.op_determinism_enabled():
        return []
    return [op for op in graph.ops if optypes.has(graph.op_type(op), optypes.CONVOLUTION)]


def environment_findings(graph, xla: bool = False) -> list[Finding]:
    """The environment the step ran in; `xla`: it compiles with XLA, so XLA_FLAGS too (opbisect adds its own, see
    tfcompat.parallel_xla_compilation)."""
    import tensorflow as tf

    names = ("TF_DETERMINISTIC_OPS", "TF_CUDNN_USE_AUTOTUNE", "TF_ENABLE_ONEDNN_OPTS", "PYTHONHASHSEED",
             "TF_CUDNN_DETERMINISTIC") + (("XLA_FLAGS",) if xla else ())
    env = {k: os.environ[k] for k in names if k in os.environ}
    threads = (tf.config.threading.get_inter_op_parallelism_threads(),
               tf.config.threading.get_intra_op_parallelism_threads())
    gpu = bool(tf.config.list_logical_devices("GPU"))
    env.setdefault("PYTHONHASHSEED", "unset")
    described = ", ".join(f"{k}={v}" for k, v in env.items())
    found = [Finding("note", f"environment: op determinism {'on' if tfcompat.op_determinism_enabled() else 'off'}; "
                             f"{described}; inter/intra-op threads {threads[0] or 'default'}/"
                             f"{threads[1] or 'default'}")]
    convs = autotuned_convolutions(graph, gpu)
    if convs:
        among = " deterministic" if switch_on(CUDNN_SWITCH) else ""
        found.append(Finding("warning", f"cuDNN autotuning is on for {len(convs)} convolution op(s): each process "
                                        f"picks the fastest of the{among} algorithms it times, so another process "
                                        f"may pick others (runs in one process cannot see it: use --processes); "
                                        f"enable_op_determinism() takes the first deterministic one that works"))
    return found


def distribute_findings(graph) -> list[Finding]:
    """Known multi-device causes of results that change with the number of replicas or between runs."""
    from ..analysis.sources import replica_of

    found = []
    draws = [op for op in graph.ops if optypes.has(graph.op_type(op), optypes.RNG_STATE)
             and replica_of(graph, op) is not None]
    if draws:
        shown = listed(draws)
        found.append(Finding("warning", f"{len(draws)} draw(s) from a tf.random.Generator inside the replicas "
                                        f"({shown}): a generator made under a strategy gives every replica its own "
                                        f"stream, so the numbers (and the training) change with the number of "
                                        f"replicas; draw outside strategy.run, or use tf.random.stateless_* seeded "
                                        f"by the example, for results that do not depend on the replica count"))
    if "horovod" in sys.modules and os.environ.get("HOROVOD_FUSION_THRESHOLD") != "0":
        found.append(Finding("warning", "Horovod is loaded and its tensor fusion is on: which gradients share a "
                                        "fused all-reduce buffer depends on timing, and so does the order of the "
                                        "sums; set HOROVOD_FUSION_THRESHOLD=0 for a fixed order"))
    return found
