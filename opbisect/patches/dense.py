"""Dense ops whose kernels sum in thread or block order, rebuilt from reductions and matmuls whose order is fixed
(TensorFlow's own op determinism turns BiasAddGrad into a reduce_sum for the same reason)."""

from __future__ import annotations

from .reductions import NotApplicable
from .registry import CUDNN_SWITCH, register, switch_only

_LOW_PRECISION = ("float16", "bfloat16")


@register("BiasAddGrad", how="a reduce_sum over every axis but the channel's")
def bias_add_grad(ctx, out_backprop):
    import tensorflow as tf

    # Axes known at trace time are a constant: computed from tf.rank they are three more ops on every call (in a
    # loop body, on every iteration).
    rank = out_backprop.shape.rank
    dynamic = rank is None
    if dynamic:
        rank = tf.rank(out_backprop)
    channels_first = ctx.attrs.get("data_format", "NHWC").startswith("NC")  # axis 1 (also the last, for a matrix)
    if channels_first:
        axes = tf.concat([[0], tf.range(2, rank)], 0) if dynamic else [0, *range(2, rank)]
    else:
        axes = tf.range(rank - 1) if dynamic else list(range(rank - 1))
    return [tf.reduce_sum(out_backprop, axis=axes)]


@register("AddN", "AccumulateNV2", how="the inputs stacked, then one reduce_sum over the new axis")
def add_n(ctx, *inputs):
    import tensorflow as tf

    if inputs[0].dtype == tf.variant:
        raise NotApplicable("it adds variants (TensorLists), not numbers")
    if len(inputs) == 1:
        return [tf.identity(inputs[0])]
    return [tf.reduce_sum(tf.stack(inputs), axis=0)]


def _log_softmax(features):
    """log_softmax in float32 at least (as the fused kernels compute half-precision logits), and the dtype."""
    import tensorflow as tf

    dtype = features.dtype
    wide = tf.cast(features, tf.float32) if dtype.name in _LOW_PRECISION else features
    return tf.nn.log_softmax(wide, axis=-1), dtype


@register("SparseSoftmaxCrossEntropyWithLogits", how="log_softmax, a gather of the labels' entries, and "
                                                     "softmax minus one-hot for the gradient")
def sparse_softmax_xent(ctx, features, labels):
    import tensorflow as tf

    log_p, dtype = _log_softmax(features)
    loss = -tf.gather(log_p, labels, axis=1, batch_dims=1)
    backprop = tf.exp(log_p) - tf.one_hot(labels, tf.shape(features)[-1], dtype=log_p.dtype)
    return [tf.cast(loss, dtype), tf.cast(backprop, dtype)]


@register("SoftmaxCrossEntropyWithLogits", how="log_softmax and a reduce_sum; softmax minus labels for the "
                                               "gradient")
def softmax_xent(ctx, features, labels):
    import tensorflow as tf

    log_p, dtype = _log_softmax(features)
    labels = tf.cast(labels, log_p.dtype)
    loss = -tf.reduce_sum(labels * log_p, axis=-1)
    return [tf.cast(loss, dtype), tf.cast(tf.exp(log_p) - labels, dtype)]


def _interpolation(out_size, in_size, align_corners: bool, half_pixel: bool):
    """The [out, in] matrix of a bilinear resize along one axis, computed as TensorFlow's resize kernels do."""
    import tensorflow as tf

    out_f, in_f = tf.cast(out_size, tf.float32), tf.cast(in_size, tf.float32)
    scale = (in_f - 1) / (out_f - 1) if align_corners else in_f / out_f
    if align_corners:
        scale = tf.where(out_size > 1, scale, in_f / out_f)
    o = tf.range(out_f)
    x = (o + 0.5) * scale - 0.5 if half_pixel else o * scale
    low = tf.math.floor(x)
    lower = tf.maximum(tf.cast(low, tf.int32), 0)
    upper = tf.minimum(tf.cast(tf.math.ceil(x), tf.int32), in_size - 1)
    lerp = (x - low)[:, None]
    return tf.one_hot(lower, in_size) * (1 - lerp) + tf.one_hot(upper, in_size) * lerp


@register("ResizeBilinearGrad", how="two float64 matmuls with the resize's interpolation matrices")
def resize_bilinear_grad(ctx, grads, original_image):
    """In float64: a float32 matmul runs in TensorFloat-32 on recent GPUs by default (10-bit mantissa), which put
    the first version 0.06 away from the kernel on the H200."""
    import tensorflow as tf

    out_h, out_w = tf.shape(grads)[1], tf.shape(grads)[2]
    in_h, in_w = tf.shape(original_image)[1], tf.shape(original_image)[2]
    align, half = bool(ctx.attrs.get("align_corners")), bool(ctx.attrs.get("half_pixel_centers"))
    wy = _interpolation(out_h, in_h, align, half)
    wx = _interpolation(out_w, in_w, align, half)
    wide = tf.float64
    g, wy, wx = tf.cast(grads, wide), tf.cast(wy, wide), tf.cast(wx, wide)
    return [tf.cast(tf.einsum("byxc,yi,xj->bijc", g, wy, wx), original_image.dtype)]


switch_only(("Conv2DBackpropFilter", "Conv2DBackpropInput", "Conv3DBackpropFilterV2", "Conv3DBackpropInputV2",
             "MaxPoolGrad", "MaxPoolGradV2"), CUDNN_SWITCH,
            "cuDNN's deterministic algorithms, chosen without autotuning (no rewrite: the algorithm is cuDNN's)")
switch_only(("CudnnRNN", "CudnnRNNV2", "CudnnRNNV3", "CudnnRNNBackprop", "CudnnRNNBackpropV2", "CudnnRNNBackpropV3"),
            CUDNN_SWITCH, "cuDNN's RNN kernels under cuDNN's determinism setting (no rewrite; verify measures it)")
