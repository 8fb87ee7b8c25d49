"""The one op-type table: what opbisect knows about each TensorFlow op type, keyed by type name.

Every rule that depends on an op's type reads this table (as JAX's rule tables are keyed by primitive):
- roles: READ (reads the variable behind its resource input, never writes it), RANDOM (a stateful random op:
  a fresh draw every execution), INPUT (its outputs come from an input pipeline or the host), CONTROL_FLOW
  (a loop or branch with body functions), CALL (a nested function call, inlined at trace time), COMMUTATIVE
  (the order of its inputs does not matter mathematically, but may in floating point), CONVOLUTION (cuDNN picks
  its algorithm), PYTHON (runs Python code), RNG_STATE (draws from a tf.random.Generator's state variable, which
  is restored like any variable), COLLECTIVE (a cross-replica reduction or gather: its resource input orders the
  collectives, it holds no state), FUSED (what XLA compiles into its neighbours with no order to choose:
  element-wise arithmetic (AddN too: XLA adds its inputs one after the other, in their order), casts, comparisons,
  selects, reshapes, slices, broadcasts, concatenations, identities, constants, and a variable's plain read and
  assignments; no reduction, no atomics, so its inputs and the state it reads fix its result bit for bit), COARSE
  (FUSED ops whose output can stay the same when their input differs, by what they compute: a shape, a predicate,
  a rounding, a part of the input; capture taps them where it derives the rest of FUSED, so that a difference
  that vanishes through one does not hide a source after it), THREAD_ORDER (FUSED ops a plain kernel may compute
  in the order its threads finish: a large AddN on a CPU, seen varying; XLA adds in order, so capture derives
  them under XLA and taps them outside it), PORTWISE (output k is input k: what differs in one does not reach the
  others), and the tf.data roles PARALLEL_DATASET and SHUFFLE_DATASET;
- remedy: one line on what to do when an op of this type is a source;
- generator: for a stateful random op, the stateless op that draws the very same numbers from the key and counter
  that RngReadAndSkip reads from a state variable and moves on (as tf.random.Generator draws: Philox, state
  [0, seed2, seed] is where the op's kernel starts in a fresh process; checked bit for bit on the CPU for each op
  type and dtype by tests/test_seeded.py): what lets each run start the op's sequence anew.

Remedy sources: TensorFlow's enable_op_determinism docstring and release notes (2.7-2.9 added the
deterministic GPU kernels), NVIDIA's framework-determinism notes, and what opbisect measured (README).
"""

from __future__ import annotations

import dataclasses

READ, RANDOM, INPUT, CONTROL_FLOW, CALL = "read", "random", "input", "control_flow", "call"
COMMUTATIVE, CONVOLUTION, PYTHON = "commutative", "convolution", "python"
PARALLEL_DATASET, SHUFFLE_DATASET, RNG_STATE = "parallel_dataset", "shuffle_dataset", "rng_state"
COLLECTIVE, FUSED, COARSE, PORTWISE, THREAD_ORDER = "collective", "fused", "coarse", "portwise", "thread_order"


@dataclasses.dataclass(frozen=True)
class OpType:
    name: str
    roles: frozenset = frozenset()
    remedy: str = ""
    workspace: frozenset = frozenset()  # output ports
    generator: str = ""


OPD = "tf.config.experimental.enable_op_determinism()"
_SEGMENT = (f"{OPD} switches to a deterministic (sorted) kernel on GPU (TF >= 2.7; measured alone: 4-5x slower on "
            f"an H200)")
_SCATTER = (f"{OPD} makes it deterministic (CPU scatters run serially; a GPU scatter then goes through the host: "
            f"measured 30-50 ms for 262k updates on an H200, 50-126x); or sum duplicate indices first with "
            f"tf.math.unsorted_segment_sum under op determinism")
_WINNER = "duplicate indices make the winner race; deduplicate indices (tf.unique) first"
_CUDNN = f"{OPD} picks deterministic cuDNN algorithms"

_REMEDIES: dict[str, str] = {
    "UnsortedSegmentSum": _SEGMENT + "; an embedding's gather gradient lands here",
    **dict.fromkeys(["UnsortedSegmentProd", "UnsortedSegmentMax", "UnsortedSegmentMin", "SegmentSum", "SegmentProd",
                     "SegmentMean", "SparseSegmentSum", "SparseSegmentMean", "SparseSegmentSqrtN"], _SEGMENT),
    "SparseSoftmaxCrossEntropyWithLogits": f"the GPU kernel raises under {OPD} (measured); with the switch on, "
                                           f"tf.nn.sparse_softmax_cross_entropy_with_logits builds itself from "
                                           f"log-softmax and gathers instead, so call it through tf.nn or Keras",
    "SoftmaxCrossEntropyWithLogits": f"{OPD} selects a deterministic GPU kernel (TF >= 2.9)",
    "BiasAddGrad": f"{OPD} uses a deterministic reduction (TF >= 2.1 via TF_DETERMINISTIC_OPS)",
    **dict.fromkeys(["ResourceScatterAdd", "ResourceScatterMul", "ResourceScatterDiv", "ResourceScatterNdAdd",
                     "ResourceScatterNdSub", "ScatterNd", "TensorScatterAdd", "TensorScatterSub",
                     "ResourceSparseApplyAdagrad", "ResourceSparseApplyAdagradV2"], _SCATTER),
    "ResourceScatterSub": _SCATTER + "; Keras Embedding + SGD/Adagrad updates land here",
    **dict.fromkeys(["ResourceScatterUpdate", "ResourceScatterNdUpdate", "TensorScatterUpdate"], _WINNER),
    "ResizeBilinearGrad": f"{OPD} uses a deterministic GPU kernel (TF >= 2.8)",
    "ResizeNearestNeighborGrad": f"no deterministic GPU kernel ({OPD} raises); use bilinear resize or "
                                 f"tf.repeat-based upsampling",
    "CropAndResizeGradImage": f"no deterministic GPU kernel ({OPD} raises); run it on CPU",
    "CropAndResizeGradBoxes": f"no deterministic GPU kernel ({OPD} raises); run it on CPU",
    "Conv2DBackpropFilter": f"{_CUDNN} without autotuning; differences that appear only across processes are "
                            f"cuDNN autotuning",
    "Conv2DBackpropInput": f"{_CUDNN} without autotuning",
    "Conv3DBackpropFilterV2": _CUDNN,
    "Conv3DBackpropInputV2": _CUDNN,
    "DepthwiseConv2dNativeBackpropFilter": f"{OPD} (TF >= 2.10 with cuDNN >= 7.6)",
    "FusedBatchNormGradV3": f"no deterministic GPU kernel for the offset gradient with training=False ({OPD} "
                            f"raises); fine-tune with training=True or freeze the layer",
    "MaxPoolGrad": f"{OPD} (deterministic cuDNN max-pool backprop)",
    "Bincount": "with weights: no GPU kernel at all, and on a CPU it races and stays nondeterministic under "
                f"{OPD}, which does not raise (measured): use tf.math.unsorted_segment_sum(weights, values, size) "
                f"under op determinism",
    "DenseBincount": "weights race; use tf.math.unsorted_segment_sum(weights, values, size) under op determinism",
    "AddN": "a large AddN rewritten by grappler accumulates in thread-finish order; sum in a fixed order "
            "(tf.math.accumulate_n is no better) or pin grappler's arithmetic_optimization off",
    "AccumulateNV2": "accumulates in thread-finish order; replace with a fixed-order sum",
    "SparseTensorDenseMatMul": f"no deterministic GPU kernel ({OPD} raises); use a dense matmul",
    "AdjustContrastv2": f"no deterministic GPU kernel ({OPD} raises)",
    "CTCLossV2": OPD,
    "PyFunc": "a tf.numpy_function/py_function: its Python code is nondeterministic (threads, unseeded RNG, "
              "set/dict order); fix the Python function",
    "EagerPyFunc": "a tf.py_function: its Python code is nondeterministic; fix the Python function",
}

_ROLES: dict[str, tuple[str, ...]] = {
    READ: ("ReadVariableOp", "ResourceGather", "ResourceGatherNd", "VariableShape", "VarIsInitializedOp",
           "_ReadVariablesOp", "ReadVariableXlaSplitND"),
    INPUT: ("IteratorGetNext", "IteratorGetNextSync", "IteratorGetNextAsOptional", "OptionalGetValue",
            "MultiDeviceIteratorGetNextFromShard", "InfeedDequeue", "InfeedDequeueTuple", "Placeholder"),
    RANDOM: ("RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal", "RandomShuffle",
             "RandomGamma", "RandomPoisson", "RandomPoissonV2", "Multinomial", "RandomCrop",
             "ParameterizedTruncatedNormal", "RandomShuffleQueueV2", "SampleDistortedBoundingBox",
             "SampleDistortedBoundingBoxV2", "RandomIndexShuffle", "ThreadUnsafeUnigramCandidateSampler",
             "UniformCandidateSampler", "LogUniformCandidateSampler", "AllCandidateSampler",
             "LearnedUnigramCandidateSampler", "FixedUnigramCandidateSampler", "RandomDataset"),
    RNG_STATE: ("StatefulUniform", "StatefulUniformInt", "StatefulStandardNormalV2", "StatefulTruncatedNormal",
                "RngReadAndSkip", "RngSkip"),
    CONTROL_FLOW: ("While", "StatelessWhile", "If", "StatelessIf", "Case", "StatelessCase"),
    CALL: ("PartitionedCall", "StatefulPartitionedCall"),
    COMMUTATIVE: ("AddN", "AddV2", "Add", "Mul", "Maximum", "Minimum", "AccumulateNV2", "LogicalAnd", "LogicalOr",
                  "BitwiseAnd", "BitwiseOr", "BitwiseXor", "SquaredDifference", "Equal", "NotEqual"),
    CONVOLUTION: ("Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropInput", "Conv3D", "Conv3DBackpropFilterV2",
                  "Conv3DBackpropInputV2", "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropFilter",
                  "DepthwiseConv2dNativeBackpropInput"),
    PYTHON: ("PyFunc", "EagerPyFunc", "PyFuncStateless"),
    COLLECTIVE: ("CollectiveReduceV2", "CollectiveReduceV3", "CollectiveGatherV2", "CollectiveAllToAllV2",
                 "CollectiveAllToAllV3", "CollectiveBcastSendV2", "CollectiveBcastRecvV2", "CollectiveReduceScatterV2",
                 "NcclAllReduce", "NcclReduce", "NcclBroadcast"),
    FUSED: ("ReadVariableOp", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp", "IdentityN",
            "Const", "Identity", "StopGradient", "Snapshot", "Reshape", "ExpandDims", "Squeeze", "StridedSlice",
            "StridedSliceGrad", "Slice", "Tile", "BroadcastTo", "ConcatV2", "Pack", "Unpack", "Split", "SplitV",
            "Transpose", "Pad", "PadV2", "Fill", "ZerosLike", "OnesLike", "Range", "Shape", "ShapeN", "Size", "Rank",
            "BroadcastGradientArgs", "Cast", "Bitcast", "Select", "SelectV2", "Add", "AddV2", "Sub", "Mul",
            "RealDiv", "Div", "DivNoNan", "FloorDiv", "FloorMod", "Maximum", "Minimum", "Neg", "Abs", "Sign",
            "Square", "SquaredDifference", "Sqrt", "Rsqrt", "RsqrtGrad", "SqrtGrad", "Reciprocal", "Pow", "Exp",
            "Expm1", "Log", "Log1p", "Tanh", "TanhGrad", "Sigmoid", "SigmoidGrad", "Relu", "ReluGrad", "Relu6",
            "Relu6Grad", "Elu", "EluGrad", "Selu", "Softplus", "Erf", "Erfc", "Floor", "Ceil", "Round", "BiasAdd",
            "Less", "LessEqual", "Greater", "GreaterEqual", "Equal", "NotEqual", "LogicalAnd", "LogicalOr",
            "LogicalNot", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "IsFinite", "IsNan", "ClipByValue", "AddN"),
    COARSE: ("Shape", "ShapeN", "Size", "Rank", "BroadcastGradientArgs", "Less", "LessEqual", "Greater",
             "GreaterEqual", "Equal", "NotEqual", "LogicalAnd", "LogicalOr", "LogicalNot", "IsFinite", "IsNan", "Sign",
             "Floor", "Ceil", "Round", "FloorDiv", "FloorMod", "StridedSlice", "Slice", "Split", "SplitV", "Unpack"),
    PORTWISE: ("IdentityN",),
    THREAD_ORDER: ("AddN",),
    PARALLEL_DATASET: ("ParallelMapDataset", "ParallelMapDatasetV2", "ParallelInterleaveDatasetV2",
                       "ParallelInterleaveDatasetV3", "ParallelInterleaveDatasetV4", "ParallelBatchDataset",
                       "MapAndBatchDataset", "ParallelFilterDataset"),
    SHUFFLE_DATASET: ("ShuffleDataset", "ShuffleDatasetV2", "ShuffleDatasetV3", "ShuffleAndRepeatDataset",
                      "ShuffleAndRepeatDatasetV2"),
}


# The stateless op drawing what each stateful random op draws (see `generator` above): the op's own inputs (shape,
# then minval and maxval) after the key and counter and the algorithm; its attributes renamed as GENERATOR_ATTRS says.
_GENERATORS: dict[str, str] = {
    "RandomUniform": "StatelessRandomUniformV2", "RandomStandardNormal": "StatelessRandomNormalV2",
    "TruncatedNormal": "StatelessTruncatedNormalV2", "RandomUniformInt": "StatelessRandomUniformIntV2",
}
GENERATOR_ATTRS = {"dtype": "dtype", "Tout": "dtype", "T": "Tshape"}  # the op's attribute -> the stateless op's
PHILOX = 1  # the algorithm number for Philox (tf.random.Algorithm.PHILOX)


# Output ports of cuDNN scratch (see `workspace` above), by the OpDef's output names: CudnnRNN*: reserve_space (3),
# host_reserved (4); FusedBatchNormV3 and its fused form: reserve_space_3 (5), cuDNN's batch-norm workspace (on a
# CPU a scalar zero).
_WORKSPACE: dict[str, tuple[int, ...]] = {
    "CudnnRNN": (3,), "CudnnRNNV2": (3, 4), "CudnnRNNV3": (3, 4), "FusedBatchNormV3": (5,), "_FusedBatchNormEx": (5,),
}


def _build() -> dict[str, OpType]:
    roles: dict[str, set] = {}
    for role, names in _ROLES.items():
        for name in names:
            roles.setdefault(name, set()).add(role)
    return {name: OpType(name, frozenset(roles.get(name, ())), _REMEDIES.get(name, ""),
                         frozenset(_WORKSPACE.get(name, ())), _GENERATORS.get(name, ""))
            for name in sorted(set(roles) | set(_REMEDIES) | set(_WORKSPACE) | set(_GENERATORS))}


TABLE: dict[str, OpType] = _build()
_UNKNOWN = OpType("")


def info(op_type: str) -> OpType:
    return TABLE.get(op_type, _UNKNOWN)


def has(op_type: str, role: str) -> bool:
    return role in info(op_type).roles


def workspace(op_type: str) -> frozenset:
    """The output ports of `op_type` whose bytes have no defined value: never compared."""
    return info(op_type).workspace


def with_role(role: str) -> frozenset:
    return frozenset(name for name, t in TABLE.items() if role in t.roles)


# Remedies by source kind, where the kind, not the op type, says what to do.
KIND_REMEDIES: dict[str, str] = {
    "random": "a stateful random op without a seed (no global and no op seed) seeds itself from the OS, in every "
              "process anew: call keras.utils.set_random_seed(...) (or tf.random.set_seed) first, or use "
              "tf.random.stateless_* with an explicit seed, or a tf.random.Generator (or keras.random.SeedGenerator) "
              "restored with the state",
    "checkpoint": "draw from a tf.random.Generator saved in the checkpoint, or from tf.random.stateless_* ops whose "
                  "seed is derived from the step number (Keras 3: keras.random.SeedGenerator)",
    "input": "the step's input differs between runs: make the input pipeline deterministic (tf.data "
             "deterministic=True, seeded shuffles) or feed the same batch",
    "state": "state read here differs before the step starts: restore it (list it in `variables`) or keep it in a "
             "tf.Variable the step owns",
    "order": "the same inputs are summed in another order in another process (iteration over a set or a dict of "
             "strings while building the step: PYTHONHASHSEED): sum in a fixed order, e.g. sorted by name, or set "
             "PYTHONHASHSEED",
    "collective": "a cross-replica reduction gave another result from identical inputs in every replica: its "
                  "summation order changes from run to run; on GPUs try NCCL_ALGO=Ring, or reduce in a fixed order "
                  "(all-gather, then sum)",
    "init": "this variable has another value at the training call in every fresh process: seed what made it "
            "before it is made (the fresh-process check pins the source: see its cause)",
    "initial": "this variable starts with another value in another process: an unseeded initializer; call "
               "keras.utils.set_random_seed(...) (or tf.random.set_seed) before creating it",
}


# The body-function attributes of each loop and branch op type, and whether it loops: what trace enters. A While's
# `cond` function is not entered (it only computes the loop condition, from loop variables that are fingerprinted).
_BODIES: dict[str, tuple[tuple[str, ...], bool]] = {
    **dict.fromkeys(("If", "StatelessIf"), (("then_branch", "else_branch"), False)),
    **dict.fromkeys(("Case", "StatelessCase"), (("branches",), False)),
    **dict.fromkeys(("While", "StatelessWhile"), (("body",), True)),
}


def body_functions(op_type: str, attr) -> list[tuple[str, str]]:
    """(region suffix, function name) of each body of a loop or branch op, from its NodeDef's `attr` map:
    `then_branch`, `else_branch`, `branch0`..., `body`."""
    names, _ = _BODIES.get(op_type, ((), False))
    out = []
    for name in names:
        if attr[name].list.func:
            out.extend((f"branch{k}", f.name) for k, f in enumerate(attr[name].list.func))
        else:
            out.append((name, attr[name].func.name))
    return out


def loops(op_type: str) -> bool:
    return _BODIES.get(op_type, ((), False))[1]
