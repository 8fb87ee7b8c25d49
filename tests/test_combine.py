"""opbisect's combine, scatter and segment-sum ops (`OpbisectCombine`, `OpbisectScatterCombine`,
`OpbisectSegmentSum`, opbisect/kernels/combine.h),
through their CPU kernels: the GPU kernels add in the same order, and the H200 runs check the two bit for bit
(benchmarks/check_combine.py, benchmarks/check_scatter.py). Here: the distinct keys and their
exact sums, the padding, every dtype, the documented order of the adds (what makes the result the same on every
run), and the scatter's writes: in place, only into rows in range, never into a tensor read before."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from opbisect import kernels

CHUNK = 128  # kCombineChunk in combine.h


@pytest.fixture(scope="module")
def combine():
    return kernels.load(cuda=False).opbisect_combine


@pytest.fixture(scope="module")
def scatter():
    return kernels.load(cuda=False).opbisect_scatter_combine


@pytest.fixture(scope="module")
def segments():
    return kernels.load(cuda=False).opbisect_segment_sum


def ordered_sums(keys, rows, acc=np.float32):
    """The combine's definition in NumPy: positions stably sorted by key; each key's rows added in segments cut at
    every multiple of CHUNK (sorted positions), each segment from zero in order, then the segments' sums from zero
    in order."""
    order = np.argsort(keys, kind="stable")
    distinct, sums = [], []
    for key in np.unique(keys):
        where = np.flatnonzero(keys[order] == key)  # consecutive sorted positions
        total = np.zeros(rows.shape[1:], acc)
        start = where[0]
        while start <= where[-1]:
            end = min(where[-1] + 1, (start // CHUNK + 1) * CHUNK)
            segment = np.zeros(rows.shape[1:], acc)
            for q in range(start, end):
                segment = (segment + rows[order[q]].astype(acc)).astype(acc)
            total = (total + segment).astype(acc)
            start = end
        distinct.append(key)
        sums.append(total.astype(rows.dtype))
    return np.array(distinct, np.int32), np.array(sums, rows.dtype).reshape((-1, *rows.shape[1:]))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(0, 600), keys=st.integers(1, 50), d=st.integers(0, 5), seed=st.integers(0, 2 ** 16))
def test_one_row_per_distinct_key_holds_its_exact_sum_then_padding(combine, n, keys, d, seed):
    rng = np.random.default_rng(seed)
    k = rng.integers(-3, keys, n).astype(np.int32)  # negative keys are keys too (the patches' -1 is padding)
    rows = rng.integers(-8, 9, (n, d)).astype(np.float32)  # integer-valued: every order gives these sums
    distinct, sums = (t.numpy() for t in combine(k, rows, np.int32(-9)))
    unique = np.unique(k)
    assert distinct.shape == (n,) and sums.shape == (n, d)
    assert (distinct[:len(unique)] == unique).all() and (distinct[len(unique):] == -9).all()
    for i, key in enumerate(unique):
        assert (sums[i] == rows[k == key].sum(0)).all()
    assert not sums[len(unique):].any()


@pytest.mark.parametrize("dtype,acc", [(np.float32, np.float32), (np.float64, np.float64),
                                       (np.float16, np.float32), (tf.bfloat16.as_numpy_dtype, np.float32)])
def test_the_adds_follow_the_documented_order_bit_for_bit(combine, dtype, acc):
    rng = np.random.default_rng(1)
    # A hot key (a Zipf law) spans many chunks; real floats, so another order would give other bits.
    keys = np.minimum(rng.zipf(1.2, 3000) - 1, 40).astype(np.int32)
    rows = (rng.normal(size=(3000, 3)) * 10).astype(dtype)
    distinct, sums = (t.numpy() for t in combine(keys, tf.constant(rows), np.int32(-1)))
    want_keys, want = ordered_sums(keys, rows, acc)
    assert (distinct[:len(want_keys)] == want_keys).all()
    assert sums[:len(want_keys)].tobytes() == want.tobytes()
    assert np.bincount(keys).max() > 4 * CHUNK  # the case the chunks exist for


def test_rows_of_any_rank_keep_their_shape(combine):
    rows = tf.reshape(tf.range(24, dtype=tf.float32), [4, 3, 2])
    distinct, sums = combine(tf.constant([2, 0, 2, 0]), rows, np.int32(-1))
    assert distinct.numpy().tolist() == [0, 2, -1, -1]
    assert sums.shape == (4, 3, 2)
    np.testing.assert_array_equal(sums.numpy()[:2], [rows[1] + rows[3], rows[0] + rows[2]])


def test_keys_and_rows_of_different_lengths_are_refused(combine):
    with pytest.raises(tf.errors.InvalidArgumentError, match="keys must be"):
        combine(tf.constant([0, 1, 2]), tf.zeros([2, 4]), np.int32(-1))


@pytest.mark.parametrize("dtype,acc", [(np.float32, np.float32), (np.float64, np.float64),
                                       (np.float16, np.float32), (tf.bfloat16.as_numpy_dtype, np.float32)])
@pytest.mark.parametrize("subtract", [False, True])
def test_the_scatter_adds_each_keys_ordered_sum_into_its_row(scatter, dtype, acc, subtract):
    rng = np.random.default_rng(2)
    keys = np.minimum(rng.zipf(1.2, 3000) - 1, 40).astype(np.int64)
    keys[rng.choice(3000, 300, replace=False)] = rng.choice([-7, 50, 2 ** 40], 300)  # dropped: out of range
    rows = (rng.normal(size=(3000, 3)) * 10).astype(dtype)
    start = (rng.normal(size=(50, 3)) * 100).astype(dtype)
    table = tf.Variable(start)
    scatter(resource=table.handle, keys=keys, rows=rows, subtract=subtract)
    want = start.copy()
    dropped_last = np.where((keys >= 0) & (keys < 50), keys, 50).astype(np.int32)  # where they sort, on a GPU too
    for key, total in zip(*ordered_sums(dropped_last, rows, acc)):
        if key == 50:
            continue
        old, add = want[key].astype(acc), total.astype(acc)  # the sum rounded to the table's type, then one add
        want[key] = (old - add if subtract else old + add).astype(dtype)
    assert table.numpy().tobytes() == want.tobytes()


def test_the_scatter_drops_keys_out_of_range_and_takes_keys_of_any_rank(scatter):
    table = tf.Variable(tf.zeros([4, 2]))
    keys = tf.constant([[1, -1, 4], [1, 2 ** 40, 3]], tf.int64)  # 2**40 would be 0 if cut to 32 bits
    scatter(resource=table.handle, keys=keys, rows=tf.ones([2, 3, 2]))
    np.testing.assert_array_equal(table.numpy(), [[0, 0], [2, 2], [0, 0], [1, 1]])


def test_a_tensor_read_before_the_scatter_keeps_its_values(scatter):
    table = tf.Variable(tf.zeros([3, 2]))
    before = table.read_value()  # may share the variable's buffer: the scatter must not write into it
    scatter(resource=table.handle, keys=tf.constant([0, 0]), rows=tf.ones([2, 2]))
    np.testing.assert_array_equal(before.numpy(), np.zeros([3, 2]))
    np.testing.assert_array_equal(table.numpy()[0], [2, 2])


@pytest.mark.parametrize("rows,match", [(tf.ones([2, 2], tf.float64), "holds float"), (tf.ones([3, 2]), "rows must")])
def test_the_scatter_refuses_rows_that_do_not_fit_the_variable(scatter, rows, match):
    table = tf.Variable(tf.zeros([3, 2]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=match):
        scatter(resource=table.handle, keys=tf.constant([0, 1]), rows=rows)


# Runs laid against the chunk boundaries (sorted positions): ending on one, starting on one and spanning several,
# one row on each side of one, a whole chunk, and a last chunk cut short. The GPU kernels find each chunk's
# segments and each run's end by searching the sorted keys, where these are the edge cases.
@pytest.mark.parametrize("lengths", [[CHUNK, 2 * CHUNK, 1, CHUNK - 1, CHUNK + 1, 3 * CHUNK + 5, 7],
                                     [1, CHUNK - 2, 1, 5 * CHUNK, CHUNK], [4 * CHUNK + 3]])
def test_runs_on_chunk_boundaries_sum_in_the_documented_order(combine, scatter, lengths):
    rng = np.random.default_rng(len(lengths))
    keys = np.repeat(np.arange(len(lengths)) * 3, lengths).astype(np.int32)
    keys = keys[rng.permutation(len(keys))]  # any input order: the stable sort lays the runs out
    rows = (rng.normal(size=(len(keys), 5)) * 10).astype(np.float32)
    want_keys, want = ordered_sums(keys, rows)
    distinct, sums = (t.numpy() for t in combine(keys, rows, np.int32(-1)))
    assert distinct[:len(want_keys)].tolist() == want_keys.tolist()
    assert sums[:len(want_keys)].tobytes() == want.tobytes()
    table = tf.Variable(tf.zeros([3 * len(lengths), 5]))
    scatter(resource=table.handle, keys=keys, rows=rows)
    assert table.numpy()[want_keys].tobytes() == (np.float32(0) + want).tobytes()


def test_calls_of_one_size_in_a_row_give_the_same_bits_as_the_first(combine, scatter):
    """On a GPU the op replays its sort from a graph from the second call of a size in a row, and captures again
    after a call of another size: every call must give the first one's bits."""
    rng = np.random.default_rng(5)
    keys = np.minimum(rng.zipf(1.3, 2000) - 1, 60).astype(np.int32)
    rows = (rng.normal(size=(2000, 4)) * 10).astype(np.float32)
    other = keys[:700]
    want_keys, want = ordered_sums(keys, rows)
    for k in [keys, keys, keys, other, keys, keys]:
        table = tf.Variable(tf.zeros([61, 4]))
        scatter(resource=table.handle, keys=k, rows=rows[:len(k)])
        distinct, sums = (t.numpy() for t in combine(k, rows[:len(k)], np.int32(-1)))
        if len(k) == len(keys):
            assert table.numpy()[want_keys].tobytes() == (np.float32(0) + want).tobytes()
            assert sums[:len(want_keys)].tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype,acc", [(np.float32, np.float32), (np.float64, np.float64),
                                       (np.float16, np.float32), (tf.bfloat16.as_numpy_dtype, np.float32)])
def test_the_segment_sum_writes_each_keys_ordered_sum_and_zeros_elsewhere(segments, dtype, acc):
    rng = np.random.default_rng(6)
    keys = np.minimum(rng.zipf(1.2, 3000) - 1, 40).astype(np.int64)
    keys[rng.choice(3000, 300, replace=False)] = rng.choice([-7, 50, 2 ** 40], 300)  # dropped: out of range
    rows = (rng.normal(size=(3000, 3)) * 10).astype(dtype)
    out = segments(keys=keys, rows=rows, num_segments=np.int64(50)).numpy()
    want = np.zeros((50, 3), dtype)
    dropped_last = np.where((keys >= 0) & (keys < 50), keys, 50).astype(np.int32)
    for key, total in zip(*ordered_sums(dropped_last, rows, acc)):
        if key < 50:
            want[key] = total
    assert out.shape == (50, 3) and out.tobytes() == want.tobytes()
    assert np.bincount(dropped_last).max() > 4 * CHUNK  # a hot key over many chunks


@settings(max_examples=30, deadline=None)
@given(n=st.integers(0, 600), num=st.integers(0, 60), d=st.integers(0, 4), seed=st.integers(0, 2 ** 16),
       wide=st.booleans())
def test_the_segment_sum_is_tensorflows_where_every_order_gives_one_sum(segments, n, num, d, seed, wide):
    rng = np.random.default_rng(seed)
    keys = rng.integers(-3, num + 3, n).astype(np.int64 if wide else np.int32)  # a few out of range each side
    rows = rng.integers(-8, 9, (n, d, 2)).astype(np.float32)  # integer-valued: every order gives these sums
    out = segments(keys=keys, rows=rows, num_segments=np.int64(num) if wide else np.int32(num)).numpy()
    inside = (keys >= 0) & (keys < num)  # TensorFlow's CPU kernel refuses ids past the end; its GPU one drops them
    want = tf.math.unsorted_segment_sum(rows[inside], keys[inside], num).numpy()
    assert out.shape == (num, d, 2) == want.shape
    assert (out == want).all()


def test_the_segment_sums_shape_is_known_while_tracing(segments):
    traced = tf.function(lambda k, r: segments(keys=k, rows=r, num_segments=7)).get_concrete_function(
        tf.TensorSpec([None], tf.int32), tf.TensorSpec([None, 3, 2]))
    assert traced.output_shapes.as_list() == [7, 3, 2]


def test_a_negative_segment_count_is_refused(segments):
    with pytest.raises(tf.errors.InvalidArgumentError, match="num_segments must be in"):
        segments(keys=tf.constant([0]), rows=tf.ones([1, 2]), num_segments=-1)
