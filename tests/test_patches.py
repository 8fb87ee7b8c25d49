"""Each patch against the op it replaces: bitwise equal where summation order cannot matter (integer-valued
floats, exactly representable sums), within a stated tolerance otherwise; the same bits over 20 runs; gradients
through the replacement equal the op's. Every patch is checked in its forms: the GPU form (opbisect's combine and
scatter ops, run here on their CPU kernels, which add in the GPU kernels' order), the GPU form where they cannot be
built ("gpu-tf": TensorFlow's sort-based segment kernels, run here on their CPU kernels), the CPU form, and the XLA
form (the sorted doubling scan, compiled with jit_compile)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from opbisect.patches import PATCHES, PatchContext, reductions

FORMS = {"gpu": dict(xla=False, on_cpu=False), "gpu-tf": dict(xla=False, on_cpu=False, own_kernels=False),
         "cpu": dict(xla=False, on_cpu=True), "xla": dict(xla=True, on_cpu=False)}
RTOL = 1e-5  # float32 sums of up to a few thousand terms, in another order


def patched(op_type: str, form: str, *inputs, **attrs):
    """The patch of `op_type` run on `inputs` (eager tensors), in a tf.function (compiled for the XLA form)."""
    ctx = PatchContext(op_type=op_type, attrs=attrs, **FORMS[form])
    fn = tf.function(lambda *xs: PATCHES[op_type].build(ctx, *xs), jit_compile=FORMS[form]["xla"], autograph=False)
    return [t.numpy() for t in fn(*inputs)]


def integers(rng, shape, dtype=np.float32):
    """Integer-valued floats: every sum of a few thousand of them is exact, in any order."""
    return tf.constant(rng.integers(-8, 9, shape).astype(dtype))


def bitwise(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.mark.parametrize("form", FORMS)
def test_unsorted_segment_sum_is_bitwise_the_op_on_exact_sums_and_drops_negative_ids(rng, form):
    data = integers(rng, (3000, 5))
    ids = rng.integers(-1, 40, 3000).astype(np.int32)  # -1: dropped, as the op drops it
    want = tf.math.unsorted_segment_sum(data, ids, 40).numpy()
    (got,) = patched("UnsortedSegmentSum", form, data, tf.constant(ids), tf.constant(40))
    assert bitwise(got, want)


@pytest.mark.parametrize("form", FORMS)
def test_unsorted_segment_sum_takes_int16_ids_as_the_op_does(rng, form):
    data = integers(rng, (500, 3))
    ids = rng.integers(-1, 40, 500).astype(np.int16)
    want = tf.math.unsorted_segment_sum(data, ids, 40).numpy()
    (got,) = patched("UnsortedSegmentSum", form, data, tf.constant(ids), tf.constant(40))
    assert bitwise(got, want)


@pytest.mark.parametrize("form", FORMS)
def test_unsorted_segment_sum_with_2d_ids_and_real_floats_is_within_tolerance(rng, form):
    data = tf.constant(rng.normal(size=(64, 30, 7)).astype(np.float32))
    ids = tf.constant(rng.integers(0, 11, (64, 30)).astype(np.int64))
    want = tf.math.unsorted_segment_sum(data, ids, 13).numpy()
    (got,) = patched("UnsortedSegmentSum", form, data, ids, tf.constant(13))
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-5)
    assert not got[11:].any()  # segments no id names stay zero


@pytest.mark.parametrize("form", FORMS)
def test_sorted_and_sparse_segment_sums_and_mean(rng, form):
    data = integers(rng, (500, 3))
    ids = tf.constant(np.sort(rng.integers(0, 20, 500)).astype(np.int32))
    (got,) = patched("SegmentSum", form, data, ids)
    assert bitwise(got, tf.math.segment_sum(data, ids).numpy())
    rows = tf.constant(rng.integers(0, 500, 300).astype(np.int32))
    sids = tf.constant(np.sort(rng.integers(0, 9, 300)).astype(np.int32))
    (got,) = patched("SparseSegmentSum", form, data, rows, sids)
    assert bitwise(got, tf.sparse.segment_sum(data, rows, sids).numpy())
    (got,) = patched("SparseSegmentMean", form, data, rows, sids)
    np.testing.assert_allclose(got, tf.sparse.segment_mean(data, rows, sids).numpy(), rtol=RTOL)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("op_type", ["ResourceScatterAdd", "ResourceScatterSub"])
def test_resource_scatters_with_duplicate_indices_write_what_the_op_writes(rng, form, op_type):
    start = integers(rng, (50, 6))
    indices = tf.constant(rng.integers(0, 7, (40, 25)).astype(np.int32))  # 1000 updates into 7 rows
    updates = integers(rng, (40, 25, 6))
    plain, ours = tf.Variable(start), tf.Variable(start)
    getattr(tf.raw_ops, op_type)(resource=plain.handle, indices=indices, updates=updates)
    ctx = PatchContext(op_type=op_type, attrs={}, **FORMS[form])
    fn = tf.function(lambda h, i, u: PATCHES[op_type].build(ctx, h, i, u), jit_compile=FORMS[form]["xla"])
    fn(ours.handle, indices, updates)
    assert bitwise(ours.numpy(), plain.numpy())


@pytest.mark.parametrize("own_kernels", [True, False], ids=["own-op", "tf-ops"])
@pytest.mark.parametrize("op_type", ["ResourceScatterAdd", "ResourceScatterSub"])
def test_the_cpu_scatter_adds_each_update_in_index_order_whatever_the_threads(rng, op_type, own_kernels):
    start = rng.normal(size=(300, 64)).astype(np.float32)
    indices = rng.integers(0, 37, 4000)  # 4000 x 64 updated elements: the rows shared among the threads
    updates = rng.normal(size=(4000, 64)).astype(np.float32)
    in_order = start.copy()  # numpy's unbuffered .at: one add after another, in index order, in float32
    (np.add if op_type == "ResourceScatterAdd" else np.subtract).at(in_order, indices, updates)
    ctx = PatchContext(op_type=op_type, attrs={}, xla=False, on_cpu=True, own_kernels=own_kernels)
    fn = tf.function(lambda h, i, u: PATCHES[op_type].build(ctx, h, i, u))
    results = []
    for _ in range(3):
        ours = tf.Variable(start)
        fn(ours.handle, tf.constant(indices.astype(np.int64)), tf.constant(updates))
        results.append(ours.numpy())
    assert all(bitwise(r, results[0]) for r in results)
    if own_kernels:  # the op's order is the serial loop's; TensorFlow's combine adds each key's rows first
        assert bitwise(results[0], in_order)
    else:
        np.testing.assert_allclose(results[0], in_order, rtol=RTOL, atol=1e-4)


def test_the_cpu_scatter_refuses_an_index_outside_the_table_as_the_op_does():
    ctx = PatchContext(op_type="ResourceScatterAdd", attrs={}, xla=False, on_cpu=True)
    table = tf.Variable(tf.zeros([4, 2]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"indices\[1\] = 4 is not in \[0, 4\)"):
        tf.function(lambda h, i, u: PATCHES["ResourceScatterAdd"].build(ctx, h, i, u))(
            table.handle, tf.constant([1, 4]), tf.ones([2, 2]))
    assert not table.numpy().any()  # nothing written


@pytest.mark.parametrize("form", [f for f in FORMS if f.startswith("gpu")])
@pytest.mark.parametrize("count", [0, 300])
def test_a_scatter_whose_update_count_is_known_only_at_run_time(rng, count, form):
    start = integers(rng, (20, 3))
    indices = tf.constant(rng.integers(0, 4, count).astype(np.int64))
    updates = integers(rng, (count, 3))
    plain, ours = tf.Variable(start), tf.Variable(start)
    plain.scatter_add(tf.IndexedSlices(updates, indices))
    ctx = PatchContext(op_type="ResourceScatterAdd", attrs={}, **FORMS[form])
    fn = tf.function(lambda h, i, u: PATCHES["ResourceScatterAdd"].build(ctx, h, i, u),
                     input_signature=[tf.TensorSpec([], tf.resource), tf.TensorSpec([None], tf.int64),
                                      tf.TensorSpec([None, 3])])
    fn(ours.handle, indices, updates)
    assert bitwise(ours.numpy(), plain.numpy())


@pytest.mark.parametrize("form", FORMS)
def test_a_scalar_update_is_broadcast_like_the_op(form):
    plain, ours = tf.Variable(tf.zeros([5, 2])), tf.Variable(tf.zeros([5, 2]))
    indices, update = tf.constant([1, 1, 3]), tf.constant(2.0)
    tf.raw_ops.ResourceScatterAdd(resource=plain.handle, indices=indices, updates=update)
    ctx = PatchContext(op_type="ResourceScatterAdd", attrs={}, **FORMS[form])
    tf.function(lambda h, i, u: PATCHES["ResourceScatterAdd"].build(ctx, h, i, u),
                jit_compile=FORMS[form]["xla"])(ours.handle, indices, update)
    assert bitwise(ours.numpy(), plain.numpy())


@pytest.mark.parametrize("form", FORMS)
def test_nd_scatters_combine_repeated_index_rows(rng, form):
    tensor = integers(rng, (6, 5, 3))
    indices = tf.constant(rng.integers(0, 3, (400, 2)).astype(np.int32))  # 400 rows into 9 addresses
    updates = integers(rng, (400, 3))
    (got,) = patched("TensorScatterAdd", form, tensor, indices, updates)
    assert bitwise(got, tf.tensor_scatter_nd_add(tensor, indices, updates).numpy())
    (got,) = patched("TensorScatterSub", form, tensor, indices, updates)
    assert bitwise(got, tf.tensor_scatter_nd_sub(tensor, indices, updates).numpy())
    (got,) = patched("ScatterNd", form, indices, updates, tf.constant([6, 5, 3]))
    assert bitwise(got, tf.scatter_nd(indices, updates, [6, 5, 3]).numpy())
    plain, ours = tf.Variable(tensor), tf.Variable(tensor)
    plain.scatter_nd_add(indices, updates)
    ctx = PatchContext(op_type="ResourceScatterNdAdd", attrs={"use_locking": True}, **FORMS[form])
    tf.function(lambda h, i, u: PATCHES["ResourceScatterNdAdd"].build(ctx, h, i, u),
                jit_compile=FORMS[form]["xla"])(ours.handle, indices, updates)
    assert bitwise(ours.numpy(), plain.numpy())


def test_a_gpu_tensor_scatter_is_the_tensor_plus_its_slots_sums_dropping_rows_out_of_range(rng):
    """Where the tensor is at most 8x the updates, on a GPU: the own segment sum of each slot's rows, added to the
    tensor (no ScatterNd); an index row with any component out of range adds nothing, as the GPU kernel ignores it."""
    tensor = integers(rng, (6, 5, 3))
    indices = rng.integers(0, 3, (60, 2)).astype(np.int32)
    indices[::7] = [[1, -1], [6, 0], [-2, 4], [2, 5], [0, 0], [5, 4], [3, 3], [9, 9], [1, 1]][:len(indices[::7])]
    updates = integers(rng, (60, 3))
    kept = [(i, u) for i, u in zip(indices, updates.numpy()) if 0 <= i[0] < 6 and 0 <= i[1] < 5]
    want = tensor.numpy().copy()
    for (a, b), u in kept:
        want[a, b] += u
    ctx = PatchContext(op_type="TensorScatterAdd", attrs={}, **FORMS["gpu"])
    fn = tf.function(lambda *xs: PATCHES["TensorScatterAdd"].build(ctx, *xs), autograph=False)
    ops = {op.type for op in fn.get_concrete_function(tensor, indices, updates).graph.get_operations()}
    assert "OpbisectSegmentSum" in ops and "TensorScatterAdd" not in ops
    assert bitwise(fn(tensor, indices, updates)[0].numpy(), want)
    (got,) = patched("ScatterNd", "gpu", tf.constant(indices), updates, tf.constant([6, 5, 3]))
    assert bitwise(got, want - tensor.numpy())


@pytest.mark.parametrize("form", ["gpu", "cpu"])  # no XLA kernel for bincount's shape-from-value output
def test_weighted_bincount_is_a_segment_sum(rng, form):
    values = tf.constant(rng.integers(0, 12, 700).astype(np.int32))  # 10, 11: past `size`, dropped
    weights = integers(rng, (700,))
    with tf.device("/CPU:0"):  # the op's GPU kernel takes no weights
        want = tf.raw_ops.DenseBincount(input=values, size=10, weights=weights).numpy()
    (got,) = patched("DenseBincount", form, values, tf.constant(10), weights, T=tf.float32)
    assert bitwise(got, want)
    rows = tf.reshape(values, [7, 100])
    with tf.device("/CPU:0"):
        want = tf.raw_ops.DenseBincount(input=rows, size=10, weights=tf.reshape(weights, [7, 100])).numpy()
    (got,) = patched("DenseBincount", form, rows, tf.constant(10), tf.reshape(weights, [7, 100]), T=tf.float32)
    assert bitwise(got, want)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_bias_add_grad_is_a_reduce_sum_over_all_but_the_channel(rng, form, layout):
    grad = integers(rng, (4, 6, 5, 3))
    want = tf.raw_ops.BiasAddGrad(out_backprop=grad, data_format=layout).numpy() if layout == "NHWC" else \
        tf.reduce_sum(grad, axis=[0, 2, 3]).numpy()  # the CPU kernel has no NCHW: its definition
    (got,) = patched("BiasAddGrad", form, grad, data_format=layout)
    assert bitwise(got, want)
    (got,) = patched("BiasAddGrad", form, grad[0, 0], data_format=layout)  # a matrix: channels last either way
    assert bitwise(got, tf.reduce_sum(grad[0, 0], axis=0).numpy())


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_bias_add_grad_of_a_rank_unknown_at_trace_time_reduces_the_same_axes(rng, layout):
    grad = integers(rng, (4, 6, 5, 3))
    ctx = PatchContext(op_type="BiasAddGrad", attrs={"data_format": layout}, **FORMS["gpu"])
    fn = tf.function(lambda g: PATCHES["BiasAddGrad"].build(ctx, g), autograph=False,
                     input_signature=[tf.TensorSpec(None, tf.float32)])
    axes = [0, 1, 2] if layout == "NHWC" else [0, 2, 3]
    assert bitwise(fn(grad)[0].numpy(), tf.reduce_sum(grad, axis=axes).numpy())


@pytest.mark.parametrize("form", FORMS)
def test_add_n_sums_in_a_fixed_order(rng, form):
    parts = [integers(rng, (30, 4)) for _ in range(17)]
    (got,) = patched("AddN", form, *parts)
    assert bitwise(got, tf.add_n(parts).numpy())


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_cross_entropies_match_the_fused_kernels(rng, form, dtype):
    logits = tf.constant((rng.normal(size=(64, 1000)) * 3).astype(dtype))
    labels = tf.constant(rng.integers(0, 1000, 64).astype(np.int32))
    loss, grad = tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(features=logits, labels=labels)
    got_loss, got_grad = patched("SparseSoftmaxCrossEntropyWithLogits", form, logits, labels)
    # float16: within 10 half-precision ulps (TF 2.16's fused kernel sums in half precision, 5 ulps from 2.21's)
    tol = 1e-5 if dtype == np.float32 else 1e-2
    assert got_loss.dtype == dtype and got_grad.dtype == dtype
    np.testing.assert_allclose(got_loss, loss.numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(got_grad, grad.numpy(), rtol=tol, atol=tol)
    dense = tf.one_hot(labels, 1000, dtype=dtype)
    loss, grad = tf.raw_ops.SoftmaxCrossEntropyWithLogits(features=logits, labels=dense)
    got_loss, got_grad = patched("SoftmaxCrossEntropyWithLogits", form, logits, dense)
    np.testing.assert_allclose(got_loss, loss.numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(got_grad, grad.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("align,half", [(False, False), (True, False), (False, True)])
def test_resize_bilinear_grad_is_the_kernels_gradient(rng, form, align, half):
    image = tf.constant(rng.normal(size=(2, 7, 9, 3)).astype(np.float32))
    for size in ([16, 20], [4, 5]):  # up and down
        grads = tf.constant(rng.normal(size=(2, *size, 3)).astype(np.float32))
        want = tf.raw_ops.ResizeBilinearGrad(grads=grads, original_image=image, align_corners=align,
                                             half_pixel_centers=half).numpy()
        (got,) = patched("ResizeBilinearGrad", form, grads, image, align_corners=align, half_pixel_centers=half)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-5)


def test_twenty_runs_give_the_same_bits(rng):
    data = tf.constant(rng.normal(size=(20000, 16)).astype(np.float32))
    ids = tf.constant(rng.integers(0, 8, 20000).astype(np.int32))
    runs = {patched("UnsortedSegmentSum", "gpu", data, ids, tf.constant(8))[0].tobytes() for _ in range(20)}
    assert len(runs) == 1


def test_gradients_through_the_replacements_are_the_ops_gradients(rng):
    data = tf.constant(rng.normal(size=(200, 4)).astype(np.float32))
    ids = tf.constant(rng.integers(0, 9, 200).astype(np.int32))
    weight = tf.constant(rng.normal(size=(9, 4)).astype(np.float32))
    logits = tf.constant(rng.normal(size=(8, 50)).astype(np.float32))
    labels = tf.constant(rng.integers(0, 50, 8).astype(np.int32))
    ctx = lambda t: PatchContext(op_type=t, attrs={}, xla=False)  # noqa: E731
    cases = [
        (data, lambda x: tf.math.unsorted_segment_sum(x, ids, 9) * weight,
         lambda x: PATCHES["UnsortedSegmentSum"].build(ctx("UnsortedSegmentSum"), x, ids, tf.constant(9))[0] * weight),
        (logits, lambda x: tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(features=x, labels=labels)[0],
         lambda x: PATCHES["SparseSoftmaxCrossEntropyWithLogits"].build(ctx("SparseSoftmaxCrossEntropyWithLogits"),
                                                                        x, labels)[0]),
    ]
    for x, op, patch in cases:
        grads = []
        for f in (op, patch):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = tf.reduce_sum(f(x))
            grads.append(tape.gradient(y, x).numpy())
        np.testing.assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-6)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(0, 800), segments=st.integers(1, 40), seed=st.integers(0, 2 ** 16))
def test_the_combine_the_sorted_kernels_and_the_doubling_scan_are_the_segment_sum_for_any_ids(n, segments, seed):
    rng = np.random.default_rng(seed)
    data = integers(rng, (n, 2))
    ids = rng.integers(-2, segments + 2, n).astype(np.int32)  # some below, some past the end: dropped, as on a GPU
    want = np.zeros((segments, 2), np.float32)
    kept = (ids >= 0) & (ids < segments)
    np.add.at(want, ids[kept], data.numpy()[kept])  # exact: integer-valued
    ids = tf.constant(ids)
    for form in ("gpu", "gpu-tf"):
        (got,) = patched("UnsortedSegmentSum", form, data, ids, tf.constant(segments))
        assert bitwise(got, want), form
    assert bitwise(tf.function(reductions._scan_sum)(data, ids, tf.constant(segments), False).numpy(), want)
    # under XLA the keys are sorted packed with their positions, by XLA's own sort
    assert bitwise(tf.function(reductions._scan_sum, jit_compile=True)(data, ids, segments, True).numpy(), want)
    assert bitwise(tf.function(reductions.fixed_point_sum, jit_compile=True)(data, ids, segments).numpy(), want)


def exact_sum(data, ids, segments):
    """The segment sum in float64 (exact for these sizes), rounded once to data's dtype; ids out of range dropped."""
    want = np.zeros((segments,) + data.shape[1:])
    kept = (ids >= 0) & (ids < segments)
    np.add.at(want, ids[kept], data[kept].astype(np.float64))
    return want.astype(data.dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, tf.bfloat16.as_numpy_dtype])
def test_under_xla_the_fixed_point_sum_is_the_exact_sum_rounded_once(rng, dtype):
    # magnitudes spread over 2**-14 .. 2**14 between rows, Zipf ids (a few segments with hundreds of rows), ids
    # below and past the end (dropped); float16 kept within its range
    spread = 3 if dtype == np.float16 else 10
    data = (rng.normal(size=(2048, 16)) * np.exp2(rng.uniform(-spread, spread, (2048, 1)))).astype(dtype)
    ids = (np.minimum(rng.zipf(1.3, 2048), 502) - 2).astype(np.int32)
    fn = tf.function(reductions.fixed_point_sum, jit_compile=True)
    got = fn(tf.constant(data), tf.constant(ids), 500).numpy()
    assert bitwise(got, exact_sum(data, ids, 500))
    # TensorFlow's own sum, in its order, is not: the fixed form is the more exact of the two
    kept = (ids >= 0) & (ids < 500)
    plain = tf.math.unsorted_segment_sum(data[kept], ids[kept], 500).numpy()
    assert dtype != np.float32 or not bitwise(plain, exact_sum(data, ids, 500))


def test_the_fixed_point_sum_keeps_infinities_and_nans_where_the_op_puts_them():
    inf, nan = np.inf, np.nan
    data = np.array([[1, inf, inf, nan, 1, -inf], [2, -inf, 1, 1, -0.0, -inf], [3, 0, inf, 2, -0.0, 5]], np.float32)
    ids = np.array([0, 0, 1], np.int32)
    got = tf.function(reductions.fixed_point_sum, jit_compile=True)(data, ids, 3).numpy()
    want = tf.math.unsorted_segment_sum(data, ids, 3).numpy()
    np.testing.assert_array_equal(got, want)  # NaN where the op has NaN
    assert np.isnan(got).sum() == 2 and np.isinf(got).sum() == 3


@pytest.mark.parametrize("num", [9, 2000])  # over 300 rows: the fixed form, then the scan (above 4 rows out per row in)
def test_under_xla_the_segment_sums_gradient_is_the_ops_in_either_form(rng, num):
    ctx = PatchContext(op_type="UnsortedSegmentSum", attrs={}, xla=True, on_cpu=False)
    data = tf.constant(rng.normal(size=(300, 4)).astype(np.float32))
    ids = tf.constant(rng.integers(-1, 9, 300).astype(np.int32))  # -1: dropped, its rows get zeros
    weight = tf.constant(rng.normal(size=(num, 4)).astype(np.float32))

    # the rows' count unknown while tracing, as a batch's: the scan is then a loop, whose own gradient XLA refuses
    @tf.function(jit_compile=True, input_signature=[tf.TensorSpec([None, 4])])
    def gradients(x):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            ours = tf.reduce_sum(reductions.segment_sum(x, ids, num, ctx) * weight)
            op = tf.reduce_sum(tf.math.unsorted_segment_sum(x, ids, num) * weight)
        return tape.gradient(ours, x), tape.gradient(op, x)

    ours, op = gradients(data)
    assert bitwise(ours.numpy(), op.numpy()) and not ours.numpy()[ids.numpy() < 0].any()


def test_under_xla_a_segment_sum_far_larger_than_its_input_takes_the_scan(rng):
    ctx = PatchContext(op_type="UnsortedSegmentSum", attrs={}, xla=True, on_cpu=False)
    data = tf.constant(rng.normal(size=(64, 4)).astype(np.float32))
    ids = tf.constant(rng.integers(0, 64, 64).astype(np.int32))
    for num, sorts in [(256, False), (257, True)]:  # _FIXED_MAX_GROWTH = 4 rows out per row in
        fn = tf.function(lambda d, i, num=num: reductions.segment_sum(d, i, num, ctx))
        types = {op.type for op in fn.get_concrete_function(data, ids).graph.get_operations()}
        assert ("XlaSort" in types) == sorts and ("UnsortedSegmentMax" in types) != sorts


@pytest.mark.parametrize("num", [256, 257])
def test_under_xla_counts_unknown_while_tracing_take_the_form_their_shapes_pick_when_compiled(rng, num):
    # As an Adam step's sum of an embedding's gradient: the rows' count unknown while tracing (a batch of None) and
    # the segments' count a variable's shape. XLA knows both when it compiles and keeps one form, with its bits.
    ctx = PatchContext(op_type="UnsortedSegmentSum", attrs={}, xla=True, on_cpu=False)
    data = tf.constant(rng.normal(size=(64, 4)).astype(np.float32))
    ids = tf.constant(rng.integers(0, 64, 64).astype(np.int32))
    table = tf.Variable(tf.zeros([num, 4]))
    fn = tf.function(lambda d, i: reductions.segment_sum(d, i, tf.shape(table)[0], ctx), jit_compile=True,
                     input_signature=[tf.TensorSpec([None, 4]), tf.TensorSpec([None], tf.int32)])
    hlo = fn.experimental_get_compiler_ir(data, ids)(stage="optimized_hlo")
    sparse = num > 4 * 64  # _FIXED_MAX_GROWTH = 4 rows out per row in
    form = (lambda d, i: reductions._scan_sum(d, i, num, xla=True)) if sparse else (
        lambda d, i: reductions.fixed_point_sum(d, i, num))
    assert "conditional" not in hlo and hlo.count(" sort(") == int(sparse)
    assert bitwise(fn(data, ids).numpy(), tf.function(form, jit_compile=True)(data, ids).numpy())


def test_under_xla_the_packed_sort_gives_the_stable_order_of_any_int_keys(rng):
    keys = rng.integers(-5, 6, 3001).astype(np.int32)  # many repeats, negative keys too
    order, ordered = tf.function(reductions.sort_order, jit_compile=True)(tf.constant(keys))
    np.testing.assert_array_equal(order.numpy(), np.argsort(keys, kind="stable"))
    np.testing.assert_array_equal(ordered.numpy(), np.sort(keys))
    assert ordered.dtype == tf.int32


@pytest.mark.parametrize("size", [7, 2 ** 30 + 1])  # 2**30 + 1 keys leave room for one chunk only (int32)
def test_the_first_stage_sums_each_key_within_chunks_of_consecutive_rows(rng, size):
    keys = np.minimum(rng.zipf(1.3, 2000) - 1, 6).astype(np.int32)  # skewed: key 0 holds most rows
    rows = integers(rng, (2000, 3))
    got_keys, got = (t.numpy() for t in reductions._presum(tf.constant(keys), rows, tf.constant(size)))
    chunks = 8 if size == 7 else 1  # 2000 rows in chunks of 256
    assert (np.diff(got_keys) >= 0).all() and np.bincount(got_keys).max() <= chunks
    want = np.zeros((7, 3), np.float32)
    np.add.at(want, keys, rows.numpy())
    total = np.zeros((7, 3), np.float32)
    np.add.at(total, got_keys, got)
    assert bitwise(total, want)


def test_rows_unknown_while_tracing_take_the_loop_form_of_the_scan(rng):
    data = tf.constant(rng.normal(size=(777, 3)).astype(np.float32))
    ids = tf.constant(rng.integers(0, 5, 777).astype(np.int32))
    fn = tf.function(lambda d, i: reductions._scan_sum(d, i, tf.constant(5), False),
                     input_signature=[tf.TensorSpec([None, 3]), tf.TensorSpec([None], tf.int32)])
    assert {"While", "StatelessWhile"} & {op.type for op in fn.get_concrete_function().graph.get_operations()}
    np.testing.assert_allclose(fn(data, ids).numpy(), tf.math.unsorted_segment_sum(data, ids, 5).numpy(), rtol=RTOL)


@pytest.mark.parametrize("value, on", [("1", True), ("true", True), ("TRUE", True), ("0", False), ("", False),
                                       ("false", False)])
def test_a_family_switch_is_read_as_tensorflow_reads_it(monkeypatch, value, on):
    from opbisect.patches.registry import CUDNN_SWITCH, switch_on, switches_on

    monkeypatch.delenv("TF_USE_DETERMINISTIC_SEGMENT_REDUCTIONS", raising=False)
    monkeypatch.setenv(CUDNN_SWITCH, value)
    assert switch_on(CUDNN_SWITCH) is on and switches_on() == ([CUDNN_SWITCH] if on else [])


def test_the_patch_library_names_the_family_switch_of_the_types_only_a_switch_fixes():
    from opbisect.patches.registry import has_rewrite, remedy, switch_of

    assert switch_of("MaxPoolGrad") == "TF_CUDNN_DETERMINISTIC" and not has_rewrite("MaxPoolGrad")
    assert switch_of("UnsortedSegmentSum") == "TF_USE_DETERMINISTIC_SEGMENT_REDUCTIONS"
    assert switch_of("BiasAddGrad") == "" and has_rewrite("BiasAddGrad")
    assert "TF_CUDNN_DETERMINISTIC=1" in remedy("MaxPoolGrad", "op")
    assert "opbisect verify" in remedy("BiasAddGrad", "op") and "=1" not in remedy("BiasAddGrad", "op")
