"""opbisect's dense ops (opbisect/kernels/dense.h) through their CPU kernels, which add in the GPU kernels' order.
The cross-entropy (`OpbisectSoftmaxXent`): what SparseSoftmaxCrossEntropyWithLogits computes (loss and gradient),
in every dtype, for rows shorter and much longer than one block's threads; a label out of range gives a row of NaN
(as the GPU kernel does); -inf logits add nothing. The column sum (`OpbisectColumnSum`): its documented order, bit
for bit. And the patches: on a GPU outside XLA they are these ops, elsewhere TensorFlow's compositions
(benchmarks/patch_sweep.py times them on the H200; benchmarks/check_dense.py compares the GPU and CPU kernels)."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import tensorflow as tf

from opbisect import kernels
from opbisect.patches import PATCHES, PatchContext

XENT = "SparseSoftmaxCrossEntropyWithLogits"


@pytest.fixture(scope="module")
def xent():
    return kernels.load(cuda=False).opbisect_softmax_xent


def reference(features, labels):
    """The op's own outputs, in float64 from float32 inputs."""
    loss, backprop = tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(
        features=tf.cast(features, tf.float64), labels=labels)
    return loss.numpy(), backprop.numpy()


@pytest.mark.parametrize("n,c", [(7, 3), (33, 100), (5, 1000), (3, 40_000)])  # 40k: 1024 threads, ~39 entries each
@pytest.mark.parametrize("label_dtype", [np.int32, np.int64])
def test_loss_and_gradient_are_the_ops_own(xent, n, c, label_dtype):
    rng = np.random.default_rng(c)
    features = (rng.standard_normal((n, c)) * 6).astype(np.float32)
    labels = rng.integers(0, c, n).astype(label_dtype)
    loss, backprop = (t.numpy() for t in xent(features, labels))
    want_loss, want_backprop = reference(features, labels)
    assert loss.dtype == backprop.dtype == np.float32 and loss.shape == (n,) and backprop.shape == (n, c)
    np.testing.assert_allclose(loss, want_loss, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(backprop, want_backprop, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("dtype,tol", [(tf.float16, 2e-3), (tf.bfloat16, 2e-2)])
def test_half_types_are_computed_in_float_and_rounded_once(xent, dtype, tol):
    rng = np.random.default_rng(0)
    wide = (rng.standard_normal((16, 5000)) * 4).astype(np.float32)
    features = tf.cast(wide, dtype)
    labels = rng.integers(0, 5000, 16)
    loss, backprop = xent(features, labels)
    assert loss.dtype == backprop.dtype == dtype
    want_loss, want_backprop = reference(tf.cast(features, tf.float32), labels)  # the rounded inputs, exactly
    np.testing.assert_allclose(tf.cast(loss, tf.float32).numpy(), want_loss, rtol=tol)
    np.testing.assert_allclose(tf.cast(backprop, tf.float32).numpy(), want_backprop, atol=tol * 0.1)


def test_a_label_out_of_range_gives_a_row_of_nan_and_leaves_the_others(xent):
    features = np.random.default_rng(1).standard_normal((4, 10)).astype(np.float32)
    labels = np.array([0, 10, -1, 9])
    loss, backprop = (t.numpy() for t in xent(features, labels))
    assert np.isnan(loss[[1, 2]]).all() and np.isnan(backprop[[1, 2]]).all()
    want_loss, want_backprop = reference(features[[0, 3]], labels[[0, 3]])
    np.testing.assert_allclose(loss[[0, 3]], want_loss, rtol=1e-5)
    np.testing.assert_allclose(backprop[[0, 3]], want_backprop, atol=1e-6)


def test_minus_infinity_logits_add_nothing(xent):
    features = np.array([[-np.inf, 0.0, 1.0, -np.inf], [-np.inf, -np.inf, -np.inf, 2.0]], np.float32)
    loss, backprop = (t.numpy() for t in xent(features, np.array([2, 3])))
    np.testing.assert_allclose(loss, [np.log1p(np.exp(-1.0)), 0.0], atol=1e-6)
    assert backprop[0, 0] == backprop[0, 3] == 0 and backprop[1, 3] == 0 and np.isfinite(backprop).all()


def _patched_ops(ctx, features, labels) -> set[str]:
    """The op types the patch builds for this context, and checks its outputs against the op's."""
    graph = tf.function(lambda f, y: PATCHES[XENT].build(ctx, f, y)).get_concrete_function(features, labels).graph
    loss, backprop = PATCHES[XENT].build(ctx, features, labels)
    want_loss, want_backprop = reference(features, labels)
    np.testing.assert_allclose(loss.numpy(), want_loss, rtol=2e-5)
    np.testing.assert_allclose(backprop.numpy(), want_backprop, atol=1e-6)
    return {op.type for op in graph.get_operations()}


def test_the_patch_is_the_own_op_on_a_gpu_outside_xla_and_the_composition_elsewhere():
    rng = np.random.default_rng(2)
    features = tf.constant(rng.standard_normal((8, 300)).astype(np.float32))
    labels = tf.constant(rng.integers(0, 300, 8))

    def ctx(**kw):
        return PatchContext(op_type=XENT, attrs={}, xla=False, **kw)
    assert "OpbisectSoftmaxXent" in _patched_ops(ctx(on_cpu=False), features, labels)  # runs its CPU kernel here
    for elsewhere in (ctx(on_cpu=True), ctx(on_cpu=False, own_kernels=False)):
        ops = _patched_ops(elsewhere, features, labels)
        assert "OpbisectSoftmaxXent" not in ops and "LogSoftmax" in ops
    under_xla = PatchContext(op_type=XENT, attrs={}, xla=True)
    assert "OpbisectSoftmaxXent" not in _patched_ops(under_xla, features, labels)


@pytest.fixture(scope="module")
def column_sum():
    return kernels.load(cuda=False).opbisect_column_sum


CHUNK, CHUNKS = 64, 256  # kColumnChunkMin, kColumnChunksMax in dense.h


def chunked_sums(x):
    """The column sum's definition in NumPy (dense.h): rows in chunks of max(64, ceil(rows / 256)), each chunk's
    rows added in order from zero in float32, then the chunks' sums added in order from zero."""
    total = np.zeros(x.shape[1], np.float32)
    size = max(CHUNK, -(-x.shape[0] // CHUNKS))
    for first in range(0, x.shape[0], size):
        chunk = np.zeros(x.shape[1], np.float32)
        for row in x[first:first + size].astype(np.float32):
            chunk = (chunk + row).astype(np.float32)
        total = (total + chunk).astype(np.float32)
    return total


@pytest.mark.parametrize("rows,cols", [(0, 5), (1, 3), (64, 7), (65, 300), (1000, 33), (20_000, 3)])  # 79-row chunks
def test_the_column_sums_add_in_the_documented_order_bit_for_bit(column_sum, rows, cols):
    x = (np.random.default_rng(rows).standard_normal((rows, cols)) * 1000).astype(np.float32)  # rounding shows
    got = column_sum(x).numpy()
    assert got.dtype == np.float32 and got.shape == (cols,)
    assert got.tobytes() == chunked_sums(x).tobytes()


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_half_column_sums_are_added_in_float_and_rounded_once(column_sum, dtype):
    x = tf.cast(np.random.default_rng(3).standard_normal((500, 40)), dtype)
    got = column_sum(x)
    assert got.dtype == dtype
    want = tf.cast(chunked_sums(tf.cast(x, tf.float32).numpy()), dtype)
    assert got.numpy().tobytes() == want.numpy().tobytes()


@pytest.fixture(scope="module")
def channel_sum():
    return kernels.load(cuda=False).opbisect_channel_sum


def block_sums(x):
    """The channel sum's definition in NumPy (dense.h): each (i, k)'s positions by a block of ChannelThreads(s)
    threads (a power of two from 32 to 256, at least s / 8), each thread's entries in order from zero, then the
    threads' sums by a tree (t with t + stride, stride halving); then each channel's n sums in order from zero."""
    n, c, s = x.shape
    threads = 32
    while threads < 256 and threads * 8 < s:
        threads *= 2
    total = np.zeros(c, np.float32)
    for i in range(n):
        lanes = np.zeros((c, threads), np.float32)
        for j in range(s):
            lanes[:, j % threads] = (lanes[:, j % threads] + x[i, :, j].astype(np.float32)).astype(np.float32)
        while threads_left := lanes.shape[1] // 2:
            lanes = (lanes[:, :threads_left] + lanes[:, threads_left:]).astype(np.float32)
        total = (total + lanes[:, 0]).astype(np.float32)
    return total


@pytest.mark.parametrize("shape", [(0, 3, 5), (2, 0, 4), (3, 4, 0), (1, 1, 1), (2, 3, 33), (3, 5, 300), (2, 2, 3000)])
def test_the_channel_sums_add_in_the_documented_order_bit_for_bit(channel_sum, shape):
    x = (np.random.default_rng(sum(shape)).standard_normal(shape) * 1000).astype(np.float32)  # rounding shows
    got = channel_sum(x).numpy()
    assert got.dtype == np.float32 and got.shape == (shape[1],)
    assert got.tobytes() == block_sums(x).tobytes()


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_half_channel_sums_are_added_in_float_and_rounded_once(channel_sum, dtype):
    x = tf.cast(np.random.default_rng(6).standard_normal((4, 6, 500)), dtype)
    got = channel_sum(x)
    assert got.dtype == dtype
    want = tf.cast(block_sums(tf.cast(x, tf.float32).numpy()), dtype)
    assert got.numpy().tobytes() == want.numpy().tobytes()


@pytest.mark.parametrize("shape,data_format,op", [((300, 20), "NHWC", "OpbisectColumnSum"),
                                                  ((4, 5, 6, 7), "NHWC", "OpbisectColumnSum"),
                                                  ((300, 20), "NCHW", "OpbisectColumnSum"),  # a matrix: C last
                                                  ((4, 7, 5, 6), "NCHW", "OpbisectChannelSum"),
                                                  ((3, 7, 9), "NCHW", "OpbisectChannelSum")])
def test_the_bias_gradient_is_an_own_sum_on_a_gpu_in_either_layout(shape, data_format, op):
    x = tf.constant(np.random.default_rng(4).standard_normal(shape).astype(np.float32))
    ctx = PatchContext(op_type="BiasAddGrad", attrs={"data_format": data_format}, xla=False, on_cpu=False)
    build = PATCHES["BiasAddGrad"].build
    graph = tf.function(lambda t: build(ctx, t)).get_concrete_function(x).graph
    assert op in {op.type for op in graph.get_operations()}
    want = tf.raw_ops.BiasAddGrad(out_backprop=x, data_format=data_format).numpy()
    np.testing.assert_allclose(build(ctx, x)[0].numpy(), want, rtol=1e-5, atol=1e-5)
    on_cpu = dataclasses.replace(ctx, on_cpu=True)
    graph = tf.function(lambda t: build(on_cpu, t)).get_concrete_function(x).graph
    assert not {"OpbisectColumnSum", "OpbisectChannelSum"} & {op.type for op in graph.get_operations()}


def test_gradients_through_the_own_ops_are_tensorflows():
    """A patched step can be differentiated again (a patched model's forward pass): each own op carries the op's
    gradient, the cross-entropy's through its gradient output (a second derivative) included."""
    rng = np.random.default_rng(5)
    logits = tf.constant(rng.standard_normal((6, 40)).astype(np.float32))
    labels = tf.constant(rng.integers(0, 40, 6))
    bias_input = tf.constant(rng.standard_normal((30, 7)).astype(np.float32))
    w_loss, w_backprop = (tf.constant(rng.standard_normal(s).astype(np.float32)) for s in ((6,), (6, 40)))
    nchw_input = tf.constant(rng.standard_normal((3, 7, 4, 5)).astype(np.float32))
    w_bias = tf.constant(rng.standard_normal(7).astype(np.float32))
    gpu = dict(attrs={}, xla=False, on_cpu=False)
    xent = functools.partial(PATCHES[XENT].build, PatchContext(op_type=XENT, **gpu))
    bias = functools.partial(PATCHES["BiasAddGrad"].build, PatchContext(op_type="BiasAddGrad", **gpu))
    nchw = dict(gpu, attrs={"data_format": "NCHW"})
    bias_nchw = functools.partial(PATCHES["BiasAddGrad"].build, PatchContext(op_type="BiasAddGrad", **nchw))
    cases = [
        (logits, lambda x: tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(features=x, labels=labels),
         lambda x: xent(x, labels), lambda out: tf.reduce_sum(out[0] * w_loss) + tf.reduce_sum(out[1] * w_backprop)),
        (bias_input, lambda x: [tf.raw_ops.BiasAddGrad(out_backprop=x)], bias,
         lambda out: tf.reduce_sum(out[0] * w_bias)),
        (nchw_input, lambda x: [tf.raw_ops.BiasAddGrad(out_backprop=x, data_format="NCHW")], bias_nchw,
         lambda out: tf.reduce_sum(out[0] * w_bias)),
    ]
    for x, op, patch, scalar in cases:
        grads = []
        for f in (op, patch):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = scalar(f(x))
            grads.append(tape.gradient(y, x).numpy())
        np.testing.assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def resize_grad():
    return kernels.load(cuda=False).opbisect_resize_bilinear_grad


def taps(o, size_in, scale, half):
    """Output position o's taps and upper weight, in float32 as dense.h's ResizeTaps (no fused multiply-add)."""
    f32 = np.float32
    where = f32(f32(f32(o) + f32(0.5)) * scale) - f32(0.5) if half else f32(f32(o) * scale)
    down = f32(np.floor(where))
    return max(int(down), 0), min(int(np.ceil(where)), size_in - 1), f32(where - down)


def gathered(g, size_in, align, half):
    """The resize gradient's definition in NumPy (dense.h): each input element gathers, rows then columns in
    increasing order, grads * wy * wx, each product and sum rounded to float32."""
    n, oh, ow, c = g.shape
    f32 = np.float32

    def weights(out, size):
        scale = f32((size - 1) / f32(out - 1)) if align and out > 1 else f32(size / f32(out))
        table = np.zeros((out, size), np.float32)
        for o in range(out):
            low, high, lerp = taps(o, size, scale, half)
            for i in range(size):
                table[o, i] = f32((f32(1) - lerp if low == i else f32(0)) + (lerp if high == i else f32(0)))
        return table

    wy, wx = weights(oh, size_in[0]), weights(ow, size_in[1])
    out = np.zeros((n, *size_in, c), np.float32)
    for i, j in np.ndindex(*size_in):
        for y in np.flatnonzero(wy[:, i]):  # the outputs that read row i, in increasing order (all, where zero)
            for x in np.flatnonzero(wx[:, j]):
                out[:, i, j] = (out[:, i, j] + (g[:, y, x] * wy[y, i]).astype(np.float32) * wx[x, j]).astype(
                    np.float32)
    return out


@pytest.mark.parametrize("size_in,size_out", [((5, 7), (10, 14)), ((12, 9), (6, 4)), ((1, 3), (4, 5)),
                                              ((6, 5), (13, 2)), ((3, 4), (1, 1)), ((2, 3), (37, 50)),
                                              ((40, 30), (3, 2))])
@pytest.mark.parametrize("align,half", [(False, False), (False, True), (True, False)])
def test_the_resize_gradient_gathers_in_the_documented_order_bit_for_bit(resize_grad, size_in, size_out, align, half):
    g = (np.random.default_rng(7).standard_normal((2, *size_out, 3)) * 100).astype(np.float32)
    image = np.zeros((2, *size_in, 3), np.float32)
    got = resize_grad(g, image, align_corners=align, half_pixel_centers=half).numpy()
    assert got.tobytes() == gathered(g, size_in, align, half).tobytes()
    want = tf.raw_ops.ResizeBilinearGrad(grads=g, original_image=image, align_corners=align,
                                         half_pixel_centers=half).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)  # TensorFlow's kernel: the same terms, other order


def test_the_resize_gradient_is_the_own_op_on_a_gpu_with_the_resize_as_its_gradient():
    rng = np.random.default_rng(8)
    g = tf.constant(rng.standard_normal((2, 9, 8, 3)).astype(np.float32))
    image = tf.zeros((2, 4, 5, 3), tf.float16)
    build = PATCHES["ResizeBilinearGrad"].build
    attrs = {"align_corners": False, "half_pixel_centers": True}
    gpu = PatchContext(op_type="ResizeBilinearGrad", attrs=attrs, xla=False, on_cpu=False)
    graph = tf.function(lambda a, b: build(gpu, a, b)).get_concrete_function(g, image).graph
    assert "OpbisectResizeBilinearGrad" in {op.type for op in graph.get_operations()}
    cpu = dataclasses.replace(gpu, on_cpu=True)
    graph = tf.function(lambda a, b: build(cpu, a, b)).get_concrete_function(g, image).graph
    assert "OpbisectResizeBilinearGrad" not in {op.type for op in graph.get_operations()}
    upstream = tf.constant(rng.standard_normal((2, 4, 5, 3)).astype(np.float16))
    with tf.GradientTape() as tape:
        tape.watch(g)
        (out,) = build(gpu, g, image)
        scalar = tf.reduce_sum(tf.cast(out, tf.float32) * tf.cast(upstream, tf.float32))
    assert out.dtype == tf.float16
    want = tf.raw_ops.ResizeBilinear(images=tf.cast(upstream, tf.float32), size=[9, 8], half_pixel_centers=True)
    np.testing.assert_allclose(tape.gradient(scalar, g).numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
