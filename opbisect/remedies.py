"""Known nondeterministic op types, with one remedy line each (what to do about a source of that type).

Sources: TensorFlow's enable_op_determinism docstring and release notes (2.7-2.9 added the deterministic GPU
kernels), NVIDIA's framework-determinism status notes, and what opbisect measured itself (see README).
"""

from __future__ import annotations

OPD = "tf.config.experimental.enable_op_determinism()"

_SEGMENT = f"{OPD} switches to a deterministic (sorted) kernel on GPU (TF >= 2.7)"
_SCATTER = (f"{OPD} makes it deterministic (GPU scatters then run a deterministic kernel, CPU scatters run "
            f"serially); or sum duplicate indices first with tf.math.unsorted_segment_sum under op determinism")

KNOWN_REMEDIES: dict[str, str] = {
    "UnsortedSegmentSum": _SEGMENT + "; an embedding's gather gradient lands here",
    "UnsortedSegmentProd": _SEGMENT,
    "UnsortedSegmentMax": _SEGMENT,
    "UnsortedSegmentMin": _SEGMENT,
    "SegmentSum": _SEGMENT,
    "SegmentProd": _SEGMENT,
    "SegmentMean": _SEGMENT,
    "SparseSegmentSum": _SEGMENT,
    "SparseSegmentMean": _SEGMENT,
    "SparseSegmentSqrtN": _SEGMENT,
    "SparseSoftmaxCrossEntropyWithLogits": f"{OPD} selects a deterministic GPU kernel (TF >= 2.9), forward and "
                                           f"gradient",
    "SoftmaxCrossEntropyWithLogits": f"{OPD} selects a deterministic GPU kernel (TF >= 2.9)",
    "BiasAddGrad": f"{OPD} uses a deterministic reduction (TF >= 2.1 via TF_DETERMINISTIC_OPS)",
    "ResourceScatterAdd": _SCATTER,
    "ResourceScatterSub": _SCATTER + "; Keras Embedding + SGD/Adagrad updates land here",
    "ResourceScatterMul": _SCATTER,
    "ResourceScatterDiv": _SCATTER,
    "ResourceScatterNdAdd": _SCATTER,
    "ResourceScatterNdSub": _SCATTER,
    "ResourceScatterUpdate": "duplicate indices make the winner race; deduplicate indices (tf.unique) first",
    "ResourceScatterNdUpdate": "duplicate indices make the winner race; deduplicate indices first",
    "ScatterNd": _SCATTER,
    "TensorScatterAdd": _SCATTER,
    "TensorScatterSub": _SCATTER,
    "TensorScatterUpdate": "duplicate indices make the winner race; deduplicate indices first",
    "ResourceSparseApplyAdagrad": _SCATTER,
    "ResourceSparseApplyAdagradV2": _SCATTER,
    "ResizeBilinearGrad": f"{OPD} uses a deterministic GPU kernel (TF >= 2.8)",
    "ResizeNearestNeighborGrad": f"no deterministic GPU kernel ({OPD} raises); use bilinear resize or "
                                 f"tf.repeat-based upsampling",
    "CropAndResizeGradImage": f"no deterministic GPU kernel ({OPD} raises); run it on CPU",
    "CropAndResizeGradBoxes": f"no deterministic GPU kernel ({OPD} raises); run it on CPU",
    "Conv2DBackpropFilter": f"{OPD} picks deterministic cuDNN algorithms without autotuning; differences that "
                            f"appear only across processes are cuDNN autotuning",
    "Conv2DBackpropInput": f"{OPD} picks deterministic cuDNN algorithms without autotuning",
    "Conv3DBackpropFilterV2": f"{OPD} picks deterministic cuDNN algorithms",
    "Conv3DBackpropInputV2": f"{OPD} picks deterministic cuDNN algorithms",
    "DepthwiseConv2dNativeBackpropFilter": f"{OPD} (TF >= 2.10 with cuDNN >= 7.6)",
    "FusedBatchNormGradV3": f"no deterministic GPU kernel for the offset gradient with training=False ({OPD} "
                            f"raises); fine-tune with training=True or freeze the layer",
    "MaxPoolGrad": f"{OPD} (deterministic cuDNN max-pool backprop)",
    "Bincount": f"no deterministic GPU kernel with weights ({OPD} raises on GPU); on CPU, weights race too: "
                f"use tf.math.unsorted_segment_sum(weights, values, size) under op determinism",
    "DenseBincount": "weights race; use tf.math.unsorted_segment_sum(weights, values, size) under op determinism",
    "AddN": "a large AddN rewritten by grappler accumulates in thread-finish order; sum in a fixed order "
            "(tf.math.accumulate_n is no better) or pin grappler's arithmetic_optimization off",
    "AccumulateNV2": "accumulates in thread-finish order; replace with a fixed-order sum",
    "SparseTensorDenseMatMul": f"no deterministic GPU kernel ({OPD} raises); use a dense matmul",
    "AdjustContrastv2": f"no deterministic GPU kernel ({OPD} raises)",
    "CTCLossV2": f"{OPD}",
    "PyFunc": "a tf.numpy_function/py_function: its Python code is nondeterministic (threads, unseeded RNG, "
              "set/dict order); fix the Python function",
    "EagerPyFunc": "a tf.py_function: its Python code is nondeterministic; fix the Python function",
}

KIND_REMEDIES: dict[str, str] = {
    "random": "a stateful random op draws anew on every execution even with a seed: use tf.random.stateless_* "
              "with an explicit seed, or a tf.random.Generator (or keras.random.SeedGenerator) restored with the "
              "state",
    "input": "the step's input differs between runs: make the input pipeline deterministic (tf.data "
             "deterministic=True, seeded shuffles) or feed the same batch",
    "state": "state read here differs before the step starts: restore it (list it in `variables`) or keep it in a "
             "tf.Variable the step owns",
}


def remedy(op_type: str, kind: str) -> str:
    if kind in KIND_REMEDIES:
        return KIND_REMEDIES[kind]
    return KNOWN_REMEDIES.get(op_type, "")

