"""Dense ops whose kernels sum in thread or block order, rebuilt from reductions and matmuls whose order is fixed
(TensorFlow's own op determinism turns BiasAddGrad into a reduce_sum for the same reason), or on a GPU from
opbisect's own kernels that add in one fixed order (opbisect/kernels/dense.h)."""

from __future__ import annotations

from .reductions import NotApplicable
from .registry import CUDNN_SWITCH, register, switch_only

_LOW_PRECISION = ("float16", "bfloat16")


def _own_op(ctx, x, name: str):
    """One of opbisect's own dense ops (opbisect/kernels/dense.h) where it can run (reductions.usable_own_ops) and
    has kernels for x's dtype; else None."""
    from .reductions import usable_own_ops

    ops = usable_own_ops(ctx) if x.dtype.name in ("float32", *_LOW_PRECISION) else None
    return None if ops is None else getattr(ops, name)


@register("BiasAddGrad", how="on a GPU opbisect's own column sum (fixed chunks of rows, added in order, no "
                             "atomics; channels first, each (n, c)'s positions by one block's tree, then in order); "
                             "elsewhere a reduce_sum over every axis but the channel's")
def bias_add_grad(ctx, out_backprop):
    """TensorFlow's reduce_sum over the rows of an LM head's [8192, 8192] gradient took 3.6x the op's own kernel
    on the H200 (benchmarks/patch_sweep.py): its column reductions read far below the copy bandwidth."""
    import tensorflow as tf

    channels_first = ctx.attrs.get("data_format", "NHWC").startswith("NC")  # axis 1 (also the last, for a matrix)
    rank = out_backprop.shape.rank
    if rank is not None:
        by_channel = channels_first and rank > 2
        own = _own_op(ctx, out_backprop, "opbisect_channel_sum" if by_channel else "opbisect_column_sum")
        if own is not None:
            return [_channel_sum(own, out_backprop) if by_channel else _column_sum(own, out_backprop)]
    # Axes known at trace time are a constant: computed from tf.rank they are three more ops on every call (in a
    # loop body, on every iteration).
    dynamic = rank is None
    if dynamic:
        rank = tf.rank(out_backprop)
    if channels_first:
        axes = tf.concat([[0], tf.range(2, rank)], 0) if dynamic else [0, *range(2, rank)]
    else:
        axes = tf.range(rank - 1) if dynamic else list(range(rank - 1))
    # float16 in float, as the op's kernels add: Eigen's CPU sum of a ResNet's float16 gradient in float16 was 54
    # away from the exact sum where BiasAddGrad's was 0.9 (benchmarks/check_dense.py on a CPU; its bfloat16 sum,
    # 1.9, was nearer than the op's). The cast costs: 1.4-4.4x the op at the CPU sweep's float16 rows.
    wide = tf.cast(out_backprop, tf.float32) if out_backprop.dtype == tf.float16 else out_backprop
    return [tf.cast(tf.reduce_sum(wide, axis=axes), out_backprop.dtype)]


def _channel_sum(channels, x):
    """The own op's sums over every axis but the channel's (axis 1). TensorFlow's reduce_sum over N, H and W read a
    ResNet's NCHW gradient at 2.3-4.9x the copy floor (1.36-1.55x the op, on the H100: reports/h100/shapes)."""
    import tensorflow as tf

    def batch_channels_positions(x):
        shape = tf.shape(x)
        return tf.reshape(x, [shape[0], shape[1], -1])

    return _own_sum(channels, x, batch_channels_positions, [1, -1] + [1] * (x.shape.rank - 2))


def _column_sum(columns, x):
    """The own op's sums over every axis but the last."""
    import tensorflow as tf

    return _own_sum(columns, x, lambda x: tf.reshape(x, [-1, tf.shape(x)[-1]]), [-1])


def _own_sum(op, x, view, kept):
    """op(view(x)) with the op's own gradient: the upstream sums, shaped `kept` (-1 at the channel's axis, 1 at the
    others summed), broadcast back over x."""
    import tensorflow as tf

    @tf.custom_gradient
    def summed(x):
        def gradient(upstream):
            return tf.broadcast_to(tf.reshape(upstream, kept), tf.shape(x))
        return op(view(x)), gradient

    return summed(x)


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


def _own_xent(own, features, labels):
    """The own op's (loss, backprop), with the op's own gradient: TensorFlow's, second derivative included."""
    import tensorflow as tf

    @tf.custom_gradient
    def xent(features):
        loss, backprop = own(features, labels)

        def gradient(up_loss, up_backprop):
            grad = up_loss[:, None] * backprop
            if up_backprop is not None:  # what flows back through the gradient output itself
                softmax = tf.nn.softmax(features)
                grad += (up_backprop - tf.reduce_sum(up_backprop * softmax, -1, keepdims=True)) * softmax
            return grad
        return (loss, backprop), gradient

    return xent(features)


@register("SparseSoftmaxCrossEntropyWithLogits", how="on a GPU opbisect's own kernel (each row's max and sum in one "
                                                     "fixed order, no atomics); elsewhere log_softmax, a gather of "
                                                     "the labels' entries, and softmax minus one-hot for the gradient")
def sparse_softmax_xent(ctx, features, labels):
    """The composition (log_softmax, exp, one_hot, a subtraction) reads and writes the logits several times where
    the op's kernel does once or twice: an LM head's patched step cost 1.25x with it (issue 42); the kernel reads
    them twice and writes once."""
    import tensorflow as tf

    own = _own_op(ctx, features, "opbisect_softmax_xent")
    if own is not None:
        return list(_own_xent(own, features, labels))
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


@register("ResizeBilinearGrad", how="on a GPU opbisect's own kernel (each input pixel gathers its output pixels' "
                                    "terms in one fixed order, no atomics); elsewhere two float64 matmuls with the "
                                    "resize's interpolation matrices")
def resize_bilinear_grad(ctx, grads, original_image):
    """The matmuls in float64: a float32 matmul runs in TensorFloat-32 on recent GPUs by default (10-bit mantissa),
    which put the first version 0.06 away from the kernel on the H200. They took 2.7-3.3x the op on an H100 (the
    casts and transposes around cuBLAS's float64 GEMMs, 7 launches against 2): hence the own kernel."""
    import tensorflow as tf

    align, half = bool(ctx.attrs.get("align_corners")), bool(ctx.attrs.get("half_pixel_centers"))
    own = _own_op(ctx, grads, "opbisect_resize_bilinear_grad")
    if own is not None:
        return [_own_resize_grad(own, grads, original_image, dict(align_corners=align, half_pixel_centers=half))]
    out_h, out_w = tf.shape(grads)[1], tf.shape(grads)[2]
    in_h, in_w = tf.shape(original_image)[1], tf.shape(original_image)[2]
    wy = _interpolation(out_h, in_h, align, half)
    wx = _interpolation(out_w, in_w, align, half)
    wide = tf.float64
    g, wy, wx = tf.cast(grads, wide), tf.cast(wy, wide), tf.cast(wx, wide)
    return [tf.cast(tf.einsum("byxc,yi,xj->bijc", g, wy, wx), original_image.dtype)]


def _own_resize_grad(own, grads, original_image, flags):
    """The own op, with the op's own gradient in grads (the forward resize; none in the image, which only gives the
    output's shape). `flags`: the resize's align_corners and half_pixel_centers."""
    import tensorflow as tf

    @tf.custom_gradient
    def summed(grads, original_image):
        def gradient(upstream):
            size = tf.shape(grads)[1:3]
            return tf.raw_ops.ResizeBilinear(images=upstream, size=size, **flags), None
        return own(grads, original_image, **flags), gradient

    return summed(grads, original_image)


switch_only(("Conv2DBackpropFilter", "Conv2DBackpropInput", "Conv3DBackpropFilterV2", "Conv3DBackpropInputV2",
             "MaxPoolGrad", "MaxPoolGradV2"), CUDNN_SWITCH,
            "cuDNN's deterministic algorithms, chosen without autotuning (no rewrite: the algorithm is cuDNN's)")
switch_only(("CudnnRNN", "CudnnRNNV2", "CudnnRNNV3", "CudnnRNNBackprop", "CudnnRNNBackpropV2", "CudnnRNNBackpropV3"),
            CUDNN_SWITCH, "cuDNN's RNN kernels under cuDNN's determinism setting (no rewrite; verify measures it)")
