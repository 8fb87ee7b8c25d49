"""Sums whose order a GPU's atomics or a CPU's threads pick: segment sums and scatters with duplicate indices.

Every one becomes a sum per key that no order can change, built five ways (`_path` picks one per node):
- **combine** (a GPU outside XLA, floating dtypes): opbisect's own op, `OpbisectSegmentSum` (opbisect/kernels,
  combine.h): a stable radix sort of the keys, each key's rows added in chunks of consecutive rows, then the
  chunks' sums, each add in a fixed place, and each key's sum written once into the zeroed output: no atomics,
  nothing waits for the host. (Until session 46 it was `OpbisectCombine`'s padded sums, one row per distinct key,
  then TensorFlow's segment sum of them: the sums written, read back and added again, 1.5-2.4x the plain op.)
- **sorted** (the same, where opbisect's op library cannot be built): TensorFlow's own sort-based kernels for the
  gradients of the sparse segment sums, `SparseSegmentSumGrad` (a dense sum per key) and
  `SparseSegmentSumGradV2` (one sum per distinct key, and the sorted keys). On a GPU, TF 2.21 runs both as a
  stable radix sort of the keys, then `SegmentReduceGPU` (one thread per output element adds its segment's rows
  in order), always, with no switch: `segment_reduction_ops_gpu.cu.h` calls it deterministic. They size their
  output from the count of distinct keys, which waits for the GPU: slower than the combine.
- **fixed** (a segment sum of float32, float16 or bfloat16 under XLA, its output at most `_FIXED_MAX_GROWTH` times
  its input, as XLA's shapes say when it compiles: `_fixed_unless_sparse`): each row scaled by a power of two taken
  from its segment's largest magnitude, rounded to an int64, and the integers added by XLA's own scatter. Integer
  adds give the same bits in any order, so its atomics no longer matter. Each input is rounded to a grid of
  2**(ceil(log2 n) - 60) of its segment's largest magnitude (2**-49 at 2048 rows), so the sum is the exact sum up to
  n half-steps of that grid (2**-39 of the largest at 2048 rows, at worst), then rounded to the dtype through
  float64: closer to the exact sum than a float32 sum in any order (in benchmarks/xla_segment_sum.py's 128.5M sums,
  the exact sum rounded once every time). Infinities and NaNs are summed apart (zeros, infinities and NaNs give the
  same result in any order).
- **scan** (under XLA otherwise, and any other dtype): sort the rows by key (a stable sort), then a segmented
  inclusive scan by doubling (Hillis-Steele), in which every row's partial sum is formed by the same adds in the
  same tree order on every run. Only sorts, gathers, `where` and elementwise adds: no atomics, no repeated
  scatter index.
- **cpu**: TensorFlow's own unsorted_segment_sum is already order-fixed on a CPU (each thread owns a range of
  output rows and adds the input rows into them in input order), and O(n).
None is NVIDIA's float64 upcast (which was shown not to be deterministic): the sum stays in a fixed order.

Scatters combine the updates of each repeated index first, then scatter one update per index:
- a variable's scatter on a GPU: opbisect's `OpbisectScatterCombine`, the combine's sums added into the variable's
  rows in place, one write per row (indices out of range dropped, as TensorFlow's GPU scatter drops them); where
  the op cannot be built, SparseSegmentSumGradV2 (one row per distinct index; indices out of range go to one spare
  index past the end, which the scatter then drops likewise);
- elsewhere outside XLA, with tf.unique (first-occurrence order, deterministic) and a segment sum;
- under XLA (no dynamic shapes), every position keeps its update slot, all but the last of each index get a
  zero: adding 0 in any order gives the same bits, so the atomics no longer matter.
"""

from __future__ import annotations

import functools
import warnings

from .. import tfcompat
from .registry import SEGMENT_SWITCH, register


class NotApplicable(Exception):
    """The patch cannot rewrite this node (its message says why); the rewrite leaves it alone and says so."""


def _column(mask, like):
    """A [n] mask shaped [n, 1, ..., 1] to select rows of `like` (whose rank may be known only at run time)."""
    import tensorflow as tf

    if like.shape.rank is not None:
        return tf.reshape(mask, [-1] + [1] * (like.shape.rank - 1))
    return tf.reshape(mask, tf.concat([[-1], tf.ones([tf.rank(like) - 1], tf.int32)], 0))


def _rank(x):
    """The rank of x: a Python int when known while tracing, else a scalar tensor."""
    import tensorflow as tf

    return x.shape.rank if x.shape.rank is not None else tf.rank(x)


def segmented_scan(rows, keys):
    """The inclusive running sum of `rows` within each run of equal `keys` (sorted), in a fixed tree order.

    With the row count known while tracing, the log2(n) doubling passes are unrolled (no loop to run on the
    host between kernels; XLA fuses them: 8 kernels in all for 2048 rows on the H200); otherwise they run in a
    tf.while_loop. (A scan by blocks of 32 rows, log32 n levels, was tried in session 15: the same device time.)"""
    import tensorflow as tf

    n = tf.shape(keys)[0]
    at = tf.range(n)

    def step(offset, x):
        back = tf.maximum(at - offset, 0)
        same = (at >= offset) & tf.equal(tf.gather(keys, back), keys)
        return tf.where(_column(same, x), x + tf.gather(x, back), x)

    static = keys.shape[0]
    if static is not None:
        offset = 1
        while offset < static:
            rows, offset = step(offset, rows), offset * 2
        return rows
    _, sums = tf.while_loop(lambda offset, _: offset < n, lambda offset, x: (offset * 2, step(offset, x)),
                            [tf.constant(1), rows])
    return sums


def _sorted(keys, rows, xla: bool):
    """(the stable order of `keys`, the keys and the rows in it)."""
    import tensorflow as tf

    order, ordered = sort_order(keys) if xla else (tf.argsort(keys, stable=True), None)
    return order, tf.gather(keys, order) if ordered is None else ordered, tf.gather(rows, order)


def sort_order(keys):
    """(the stable order of `keys`, the keys in it), under XLA: one sort of each key packed with its position
    (key * n + position, int64), which XLA sorts with a plain comparison. tf.argsort, and tf.sort too, are a
    TopKV2 there, whose sort compares values then positions: 24.8 of the segment sum's 47 us on the H200 at 2048
    keys (benchmarks/xla_segment_sum.py)."""
    import tensorflow as tf

    n = tf.size(keys, out_type=tf.int64)
    packed = tfcompat.xla_sort(tf.cast(keys, tf.int64) * n + tf.range(n, dtype=tf.int64))
    return packed % n, tf.cast(packed // n, keys.dtype)  # floor division: right for negative keys too


_SORT_KERNEL_DTYPES = ("float16", "bfloat16", "float32", "float64")  # TF's GPU kernels of the two ops


_FIXED_DTYPES = ("float16", "bfloat16", "float32")  # 62 bits hold a float32's 24 and a sum's headroom; not float64's
# Output rows per input row past which the fixed form's int64 buffer costs more than a sort. (A compact form, the
# int64 sums one slot per input row, was timed on 2026-12-07 and dropped: below this growth it was slower, 22 against
# 19 us at 2048 rows into 4000 on an H100, one kernel more to find each key's slot; above it slower than the scan,
# its int64 adds on a skewed id waiting on each other: reports/h100/shapes/README.md#lease28.)
_FIXED_MAX_GROWTH = 4


def _path(ctx, dtype) -> str:
    """Which of the forms above a node gets: "cpu", "combine", "sorted", "fixed" or "scan" (a segment sum's "fixed"
    becomes "scan" where its output is much larger than its input: `segment_sum`)."""
    if ctx.on_cpu:
        return "cpu"
    if ctx.xla:
        return "fixed" if dtype.name in _FIXED_DTYPES else "scan"
    if dtype.name not in _SORT_KERNEL_DTYPES:
        return "scan"
    return "combine" if usable_own_ops(ctx) is not None else "sorted"


def usable_own_ops(ctx):
    """opbisect's op library where this node may run on it: a GPU, outside XLA (which compiles TensorFlow's ops
    only), unless the patch is to take TensorFlow's kernels; else None."""
    if ctx.on_cpu or ctx.xla or not ctx.own_kernels:
        return None
    return own_ops()


def cpu_own_ops(ctx, dtype):
    """opbisect's op library where this node runs on a CPU, outside XLA, in a dtype its CPU scatter takes; else
    None (then the patch combines the duplicates with TensorFlow's ops: 1.15-2.41x the racy kernel in the CPU sweep,
    benchmarks/README.md, against the op's 0.27-0.35x)."""
    if not ctx.on_cpu or ctx.xla or not ctx.own_kernels or dtype.name not in _SORT_KERNEL_DTYPES:
        return None
    return own_ops()


@functools.cache
def own_ops():
    """opbisect's op library (OpbisectSegmentSum, OpbisectScatterCombine, and the dense ops of patches/dense.py),
    loaded; None where it cannot be built here (said once, as a warning: the patches then take TensorFlow's ops)."""
    import tensorflow as tf

    from ..kernels import BuildError, load

    try:
        return load(cuda=bool(tf.config.list_physical_devices("GPU")))
    except BuildError as exc:
        warnings.warn(f"opbisect's op library could not be built ({str(exc).splitlines()[0]}): the patches use "
                      f"TensorFlow's ops (on a GPU the segment sums and scatters its sort-based kernels, which wait "
                      f"for the GPU once per sum, the cross-entropy and bias gradients its compositions; on a CPU "
                      f"the scatters combine their repeated indices first, 1.15-2.41x the racy kernel)", stacklevel=2)
        return None


def segment_sum(rows, ids, num_segments, ctx):
    """unsorted_segment_sum(rows, ids, num_segments) over the first axis, deterministically. Ids outside
    [0, num_segments) are dropped, as the GPU kernel drops them."""
    import tensorflow as tf

    path = _path(ctx, rows.dtype)
    if path == "cpu":
        with tf.device("/device:CPU:0"):
            return tf.math.unsorted_segment_sum(rows, ids, num_segments)
    if path == "combine":
        return _combined_sum(rows, ids, num_segments)
    if path == "sorted":
        return _sorted_kernel_sum(rows, ids, num_segments)
    if path == "fixed":
        return _fixed_unless_sparse(rows, ids, num_segments)
    return _scan_sum(rows, ids, num_segments, ctx.xla)


def _fixed_unless_sparse(rows, ids, num_segments):
    """Under XLA, the fixed form, or the scan where the output has more than _FIXED_MAX_GROWTH times the input's
    rows. Where either count is unknown while tracing, a cond on the two, which XLA folds when it compiles (every
    shape known then), keeping one form. (Until 2026-12-07 an unknown count took the fixed form: BERT-base mixed's
    two Adam sums, 4,096 rows into a vocabulary of 30,522 through a variable's shape, took 277 us each where the
    scan takes 136 on an H100; reports/h100/shapes/README.md#lease30.)"""
    import tensorflow as tf

    def scan():
        return _scan_sum(rows, ids, num_segments, xla=True)

    def fixed():
        return fixed_point_sum(rows, ids, num_segments)

    num = tf.get_static_value(num_segments)
    if num is not None and rows.shape[0] is not None:
        return scan() if int(num) > _FIXED_MAX_GROWTH * max(rows.shape[0], 1) else fixed()
    count = tf.maximum(tf.shape(rows, out_type=tf.int64)[0], 1)
    return tf.cond(tf.cast(num_segments, tf.int64) > _FIXED_MAX_GROWTH * count, scan, fixed)


def _negative_outside(keys, num):
    """`keys` as int32 with every key outside [0, num) replaced by -1: the rows the segment-sum op dropped, whose
    gradient is zeros (the op takes num_segments below 2**31, so int32 holds every kept key)."""
    import tensorflow as tf

    keys, num = tf.cast(keys, tf.int64), tf.cast(num, tf.int64)
    return tf.cast(tf.where((keys >= 0) & (keys < num), keys, -1), tf.int32)


def _combined_sum(rows, ids, num_segments):
    import tensorflow as tf

    if ids.dtype not in (tf.int32, tf.int64):  # the op takes the ids of TensorFlow's GPU kernels; int16 widened
        ids = tf.cast(ids, tf.int64)

    @tf.custom_gradient
    def summed(rows):
        # Each key's sum written once into the zeroed output (no atomics); the op drops ids out of range itself, so
        # the forward step launches nothing else.
        total = own_ops().opbisect_segment_sum(ids, rows, num_segments)

        def gradient(upstream):  # the op's own gradient: each row gets its segment's, a dropped row zeros
            keys = _negative_outside(ids, num_segments)
            picked = tf.gather(upstream, tf.maximum(keys, 0))
            return tf.where(_column(keys >= 0, picked), picked, tf.zeros_like(picked))

        return total, gradient

    return summed(rows)


def _on_host():
    """Where the sizes are computed: the kernels read their output size from host memory, and a size computed on
    the GPU would cost a copy back to the host that waits for everything queued before it."""
    import tensorflow as tf

    return tf.device("/device:CPU:0")


def _spare_key(keys, num):
    """`keys` as int32 with every key outside [0, num) replaced by num, so that one extra segment collects them,
    and num + 1 (on the host). The kernels take an int32 output size: a first dimension of 2**31 - 1 or more
    cannot be patched this way."""
    import tensorflow as tf

    with _on_host():
        num = tf.cast(num, tf.int64)
        size = tf.cast(num + 1, tf.int32)
    keys = tf.cast(keys, tf.int64)
    return tf.cast(tf.where((keys >= 0) & (keys < num), keys, num), tf.int32), size


def _unless_empty(keys, build, empty):
    """build() when there is at least one key, else empty(): SparseSegmentSumGrad leaves its output uninitialised
    on no input (seen on a CPU and on the H200), and SparseSegmentSumGradV2's GPU form reads the key before the
    first."""
    import tensorflow as tf

    static = keys.shape[0]
    if static is not None:
        return build() if static > 0 else empty()
    with _on_host():
        some = tf.size(keys) > 0
    return tf.cond(some, build, empty)


_CHUNK = 256  # rows: the longest run of one key that the sort kernels add up in one thread


def _presum(keys, rows, size):
    """Stage one of two: each key's rows summed within each chunk of _CHUNK consecutive rows, as (keys, sums)
    sorted by key then chunk. The sort kernels add one key's rows in one thread, one row after the other: with
    skewed ids (a Zipf law, a padding token) one key holding a fifth of 65k rows took 4.3 ms on the H200. Chunked,
    no run is longer than _CHUNK rows here, nor than the number of chunks in stage two; the order stays fixed.
    `keys` are int32 in [0, size)."""
    import tensorflow as tf

    if keys.shape[0] is not None and keys.shape[0] <= _CHUNK:
        return keys, rows
    with _on_host():
        n = tf.size(keys, out_type=tf.int64)
        size = tf.cast(size, tf.int64)
        # The (key, chunk) pairs are numbered key * chunks + chunk, which must stay below 2**31 - 1 (the kernels'
        # int32 output size): a very large table gets fewer, longer chunks.
        chunks = tf.maximum(tf.minimum((n + _CHUNK - 1) // _CHUNK, (2 ** 31 - 2) // size), 1)
        pairs_size = tf.cast(size * chunks, tf.int32)
    pair = tf.cast(keys, tf.int64) * chunks + tf.range(n) * chunks // n
    sums, pairs = tf.raw_ops.SparseSegmentSumGradV2(grad=rows, indices=tf.cast(pair, tf.int32),
                                                    segment_ids=tf.range(tf.size(keys)), dense_output_dim0=pairs_size)
    return tf.cast(tf.cast(pairs, tf.int64) // chunks, tf.int32), sums


def _sorted_kernel_sum(rows, ids, num_segments):
    import tensorflow as tf

    keys, size = _spare_key(ids, num_segments)
    with _on_host():
        segments = size - 1

    @tf.custom_gradient
    def summed(rows):
        partial_keys, partial = _presum(keys, rows, size)
        total = tf.raw_ops.SparseSegmentSumGrad(grad=partial, indices=partial_keys,
                                                segment_ids=tf.range(tf.size(partial_keys)), output_dim0=size)

        # the spare segment, last, is dropped (the slice shares the buffer)
        return total[:segments], lambda upstream: _spare_gradient(upstream, keys)

    return _unless_empty(keys, lambda: summed(rows),
                         lambda: tf.zeros(tf.concat([[segments], tf.shape(rows)[1:]], 0), rows.dtype))


def _spare_gradient(upstream, keys):
    """The segment sum's own gradient, where a dropped row's key is the spare segment just past the end: each row
    gets its segment's upstream, a dropped row zeros."""
    import tensorflow as tf

    spare = tf.zeros(tf.concat([[1], tf.shape(upstream)[1:]], 0), upstream.dtype)
    return tf.gather(tf.concat([upstream, spare], 0), keys)


_FIXED_BITS = 62  # each sum's magnitude stays below 2**62: an int64 with its sign and a bit to spare


def _power_of_two(exponent):
    """2.0**exponent as a float64, exactly (its bits written; int32 exponents within float64's normal range)."""
    import tensorflow as tf

    return tf.bitcast(tf.bitwise.left_shift(tf.cast(exponent, tf.int64) + 1023, 52), tf.float64)


def fixed_point_sum(rows, ids, num_segments):
    """The fixed form (the module's docstring): unsorted_segment_sum(rows, ids, num_segments) over the first axis,
    through int64 adds. Ids outside [0, num_segments) are dropped."""
    import tensorflow as tf

    num = tf.cast(num_segments, tf.int64)
    ids = tf.cast(ids, tf.int64)
    keys = tf.where((ids >= 0) & (ids < num), ids, num)  # dropped ids: a spare segment past the end

    @tf.custom_gradient
    def summed(rows):
        x = tf.cast(rows, tf.float32)
        finite = tf.math.is_finite(x)
        clean = tf.where(finite, x, tf.zeros_like(x))
        largest = tf.math.unsorted_segment_max(tf.reduce_max(tf.abs(clean), axis=tf.range(1, tf.rank(x))), keys,
                                               num + 1)  # a max: order-free
        # largest < 2**top (its exponent field, read from its bits; an empty segment's lowest float becomes 0), and
        # n rows sum to less than 2**(top + width): scaled by 2**shift they stay below 2**_FIXED_BITS.
        top = tf.bitwise.right_shift(tf.bitcast(tf.maximum(largest, 0.0), tf.int32), 23) - 126
        n = tf.cast(tf.maximum(tf.shape(x)[0], 1), tf.float64)
        width = tf.cast(tf.math.ceil(tf.math.log(n) / tf.math.log(tf.constant(2.0, tf.float64))), tf.int32) + 1
        shift = _FIXED_BITS - width - top
        scaled = tf.cast(clean, tf.float64) * _column(tf.gather(_power_of_two(shift), keys), clean)  # exact
        total = tf.math.unsorted_segment_sum(tf.cast(tf.round(scaled), tf.int64), keys, num + 1)
        back = tf.cast(tf.cast(total, tf.float64) * _column(_power_of_two(-shift), total), tf.float32)
        odd = tf.math.unsorted_segment_sum(tf.where(finite, tf.zeros_like(x), x), keys, num + 1)  # inf, NaN
        return tf.cast((back + odd)[:num], rows.dtype), lambda upstream: _spare_gradient(upstream, keys)

    return summed(rows)


def _scan_sum(rows, ids, num_segments, xla: bool):
    """The scan form: each key's sum is its run's last running sum, written to its segment by a segment sum in
    which, under XLA, every other row goes past the end, where XLA's scatter drops it: one add per output row, no
    atomics that wait on each other. (Until 2026-12-07 every other row added zeros, in any order the same bits, as
    it still does outside XLA, but a skewed id's adds of zeros waited on each other: on an H100 136 against 151 us
    at BERT-base's word embedding, 474 against 605 us at 65k Zipf rows into 1M, the same bits;
    reports/h100/shapes/README.md#lease28c.) O(rows + segments): a search of every segment among the keys (the
    form before) made XLA compare all pairs, 503 GiB for 65k ids into 1M rows."""
    import tensorflow as tf

    num = tf.cast(num_segments, tf.int64)
    ids = tf.cast(ids, tf.int64)
    kept = tf.where((ids >= 0) & (ids < num), ids, num)  # dropped ids: a segment past the end

    # The op's own gradient, not the scan's: where the rows' count is unknown while tracing the scan is a loop,
    # whose gradient XLA cannot compile (its accumulators have no fixed size), and it would be slower anyway.
    @tf.custom_gradient
    def summed(rows):
        # One sentinel row (the segment after that), so that no tensor below is empty.
        keys = tf.concat([kept, tf.reshape(num + 1, [1])], 0)
        padded = tf.concat([rows, tf.zeros(tf.concat([[1], tf.shape(rows)[1:]], 0), rows.dtype)], 0)
        _, keys, padded = _sorted(keys, padded, xla)
        sums = segmented_scan(padded, keys)
        last = tf.concat([tf.not_equal(keys[:-1], keys[1:]), tf.ones([1], tf.bool)], 0)
        if not xla:  # TensorFlow's CPU kernel refuses ids past the end: the other rows add zeros
            only_last = tf.where(_column(last, sums), sums, tf.zeros_like(sums))
            total = tf.math.unsorted_segment_sum(only_last, keys, num + 2)[:num]
        else:  # the dropped ids' segment and the sentinel's are past the end too
            total = tf.math.unsorted_segment_sum(sums, tf.where(last, keys, num), num)
        return total, lambda upstream: _spare_gradient(upstream, kept)

    return summed(rows)


def _as_rows(data, ids):
    """ids as a vector and data as [n, ...] rows (ids may have any rank; data's leading axes match them)."""
    import tensorflow as tf

    k = _rank(ids)
    return tf.reshape(data, tf.concat([[-1], tf.shape(data)[k:]], 0)), tf.reshape(ids, [-1])


def combine(keys, rows, ctx):
    """(positions, sums): one update per distinct key, the sum of that key's rows, at a position holding the
    key. Under XLA every position stays, and all but the last of each key carry zeros."""
    import tensorflow as tf

    if not ctx.xla:
        unique, slot = tf.unique(keys)
        count = tf.size(unique)
        first = tf.math.unsorted_segment_min(tf.range(tf.size(keys)), slot, count)  # a min: order-free
        return first, segment_sum(rows, slot, count, ctx)
    order, keys, rows = _sorted(keys, rows, xla=True)
    sums = segmented_scan(rows, keys)
    last = tf.concat([tf.not_equal(keys[:-1], keys[1:]), tf.ones([1], tf.bool)], 0)[:tf.size(keys)]
    return order, tf.where(_column(last, sums), sums, tf.zeros_like(sums))


_SEGMENT_HOW = ("a stable sort by id, then each id's rows added in a fixed order (opbisect's combine op on a GPU, or "
                "TensorFlow's sort-based segment kernels; a doubling scan under XLA): the same adds in the same order "
                "every run; under XLA, float32 and narrower, each segment's rows in fixed point added as int64, whose "
                "sum no order changes")


@register("UnsortedSegmentSum", how=_SEGMENT_HOW, switch=SEGMENT_SWITCH)
def unsorted_segment_sum(ctx, data, segment_ids, num_segments):
    import tensorflow as tf

    rows, ids = _as_rows(data, segment_ids)
    return [tf.cast(segment_sum(rows, ids, num_segments, ctx), data.dtype)]


@register("SegmentSum", how=_SEGMENT_HOW, switch=SEGMENT_SWITCH)
def sorted_segment_sum(ctx, data, segment_ids):
    import tensorflow as tf

    n = tf.size(segment_ids)
    num = tf.where(n > 0, tf.cast(segment_ids[tf.maximum(n - 1, 0)], tf.int64) + 1, 0)
    return [segment_sum(data, segment_ids, num, ctx)]


@register("SparseSegmentSum", how=_SEGMENT_HOW, switch=SEGMENT_SWITCH)
def sparse_segment_sum(ctx, data, indices, segment_ids):
    return sorted_segment_sum(ctx, _gather(data, indices), segment_ids)


@register("SparseSegmentMean", how=_SEGMENT_HOW + "; divided by exact integer counts", switch=SEGMENT_SWITCH)
def sparse_segment_mean(ctx, data, indices, segment_ids):
    import tensorflow as tf

    total = sorted_segment_sum(ctx, _gather(data, indices), segment_ids)[0]
    ones = tf.ones_like(segment_ids, dtype=data.dtype)
    count = sorted_segment_sum(ctx, ones, segment_ids)[0]
    return [total / _column(tf.maximum(count, 1), total)]


def _gather(data, indices):
    import tensorflow as tf

    return tf.gather(data, indices)


_SCATTER_HOW = ("the updates of each repeated index summed deterministically first, then one update per index; on a "
                "CPU, each update added to its row in index order, every row by one thread")


def _scatter(ctx, write, target, indices, updates, slice_rows):
    """Call `write(target, indices, updates)` with duplicates combined (the "sorted" and "cpu" paths);
    `slice_rows` is the target's first dimension."""
    import tensorflow as tf

    rows, keys = _as_rows(updates, indices)
    if _path(ctx, rows.dtype) == "sorted":
        # Every key outside the target's rows goes to the spare key (its first dimension), which the write then
        # ignores, as the GPU kernel ignores an index out of range.
        keys, size = _spare_key(keys, slice_rows)

        def combined():
            partial_keys, partial = _presum(keys, rows, size)
            sums, distinct = tf.raw_ops.SparseSegmentSumGradV2(
                grad=partial, indices=partial_keys, segment_ids=tf.range(tf.size(partial_keys)),
                dense_output_dim0=size)
            write(target, distinct, sums)

        return _unless_empty(keys, combined, lambda: None)
    positions, sums = combine(tf.cast(keys, tf.int64), rows, ctx)
    return write(target, tf.gather(keys, positions), sums)


@register("ResourceScatterAdd", how=_SCATTER_HOW)
def resource_scatter_add(ctx, resource, indices, updates):
    return _resource_scatter(ctx, "ResourceScatterAdd", resource, indices, updates)


@register("ResourceScatterSub", how=_SCATTER_HOW)
def resource_scatter_sub(ctx, resource, indices, updates):
    return _resource_scatter(ctx, "ResourceScatterSub", resource, indices, updates)


def _resource_scatter(ctx, op_type: str, resource, indices, updates):
    import tensorflow as tf

    shape = None
    if updates.shape.rank in (0, None):  # a scalar update (maybe) for every slice: broadcast it
        shape = tf.raw_ops.VariableShape(input=resource, out_type=tf.int64)  # into host memory
        with _on_host():
            slice_shape = tf.cast(shape[1:], tf.int32)
        updates = tf.broadcast_to(updates, tf.concat([tf.shape(indices), slice_shape], 0))
    in_order = cpu_own_ops(ctx, updates.dtype)
    if in_order is not None:  # a CPU: each update added in index order, the rows shared out among its threads
        in_order.opbisect_scatter_in_order(resource=resource, keys=indices, rows=updates,
                                           subtract=op_type == "ResourceScatterSub")
        return []
    if _path(ctx, updates.dtype) == "combine":
        # One op: no atomics, and none of the three kernels (gather, add, write) that would update the rows after
        # a separate combine (about 0.2 ms a scatter on the H200, a third of a small sparse step).
        own_ops().opbisect_scatter_combine(resource=resource, keys=indices, rows=updates,
                                           subtract=op_type == "ResourceScatterSub")
        return []
    if shape is None:
        shape = tf.raw_ops.VariableShape(input=resource, out_type=tf.int64)
    write = getattr(tf.raw_ops, op_type)
    with _on_host():
        rows = shape[0]
    _scatter(ctx, lambda r, i, u: write(resource=r, indices=i, updates=u), resource, indices, updates, rows)
    return []


def _linear(indices, shape):
    """[..., K] indices into `shape` as [...] int64 offsets (row-major), and the [-1, K] index rows."""
    import tensorflow as tf

    k = indices.shape[-1]
    if k is None:
        raise NotApplicable("an index depth unknown at trace time")
    dims = tf.cast(shape[:k], tf.int64)
    strides = tf.math.cumprod(dims, exclusive=True, reverse=True)
    rows = tf.reshape(indices, [-1, k])
    return tf.reduce_sum(tf.cast(rows, tf.int64) * strides, axis=1), rows


def _nd_scatter(ctx, write, target, indices, updates, shape):
    """A scatter_nd-family write with the updates of repeated index rows combined first."""
    import tensorflow as tf

    keys, index_rows = _linear(indices, shape)
    rows = tf.reshape(updates, tf.concat([[-1], tf.shape(updates)[_rank(indices) - 1:]], 0))
    positions, sums = combine(keys, rows, ctx)
    return write(target, tf.gather(index_rows, positions), sums)


# A tensor's scatter on a GPU becomes the tensor plus every slot's sum (`_slot_sums`) where the tensor holds at most
# this many times the updates' elements: the sum reads and writes the whole tensor about four times (about 11 ps an
# element on an H100), where TensorFlow's ScatterNd kernel, which the combined form still runs, took about 150 ps an
# update's element (630 us for 8k rows of 512: reports/h100/shapes/README.md#lease14).
_DENSE_SCATTER_GROWTH = 8


def _slot_sums(ctx, indices, updates, shape):
    """Every slot's updates summed by the own segment sum (each slot's rows in one fixed order), as a tensor of
    `shape`; an index row with a component out of range is dropped, as the GPU kernels drop it. None where the own
    ops do not run, or the index depth is not known."""
    import tensorflow as tf

    k = indices.shape[-1]
    if usable_own_ops(ctx) is None or updates.dtype.name not in _SORT_KERNEL_DTYPES or k is None:
        return None
    keys, index_rows = _linear(indices, shape)
    dims = tf.cast(shape[:k], tf.int64)
    wide = tf.cast(index_rows, tf.int64)
    keys = tf.where(tf.reduce_all((wide >= 0) & (wide < dims), axis=1), keys, -1)
    rows = tf.reshape(updates, tf.concat([[-1], tf.shape(updates)[_rank(indices) - 1:]], 0))
    return tf.reshape(_combined_sum(rows, keys, tf.reduce_prod(dims)), shape)


def _tensor_scatter(ctx, write, tensor, indices, updates):
    """The tensor plus (or minus) its slots' sums where the tensor is at most _DENSE_SCATTER_GROWTH times the
    updates (sizes known while tracing); else the combined scatter."""
    import tensorflow as tf

    size, moved = tensor.shape.num_elements(), updates.shape.num_elements()
    if size is not None and moved and size <= _DENSE_SCATTER_GROWTH * moved:
        sums = _slot_sums(ctx, indices, updates, tf.shape(tensor))
        if sums is not None:
            return tensor + sums if write is tf.tensor_scatter_nd_add else tensor - sums
    return _nd_scatter(ctx, write, tensor, indices, updates, tf.shape(tensor))


@register("TensorScatterAdd", how=_SCATTER_HOW)
def tensor_scatter_add(ctx, tensor, indices, updates):
    import tensorflow as tf

    return [_tensor_scatter(ctx, tf.tensor_scatter_nd_add, tensor, indices, updates)]


@register("TensorScatterSub", how=_SCATTER_HOW)
def tensor_scatter_sub(ctx, tensor, indices, updates):
    import tensorflow as tf

    return [_tensor_scatter(ctx, tf.tensor_scatter_nd_sub, tensor, indices, updates)]


@register("ScatterNd", how=_SCATTER_HOW)
def scatter_nd(ctx, indices, updates, shape):
    """On a GPU the slots' sums themselves (zeros plus the sums is the sums); else zeros and the combined scatter."""
    import tensorflow as tf

    sums = _slot_sums(ctx, indices, updates, shape)
    if sums is not None:
        return [sums]
    zeros = tf.zeros(shape, updates.dtype)
    return [_nd_scatter(ctx, tf.tensor_scatter_nd_add, zeros, indices, updates, shape)]


@register("ResourceScatterNdAdd", "ResourceScatterNdSub", how=_SCATTER_HOW)
def resource_scatter_nd(ctx, ref, indices, updates):
    import tensorflow as tf

    op = tf.raw_ops.ResourceScatterNdAdd if ctx.op_type == "ResourceScatterNdAdd" else tf.raw_ops.ResourceScatterNdSub
    shape = tf.raw_ops.VariableShape(input=ref, out_type=tf.int64)
    _nd_scatter(ctx, lambda r, i, u: op(ref=r, indices=i, updates=u, use_locking=ctx.attrs.get("use_locking", True)),
                ref, indices, updates, shape)
    return []


@register("DenseBincount", how="a weighted count is a segment sum: " + _SEGMENT_HOW)
def dense_bincount(ctx, values, size, weights):
    import tensorflow as tf

    if ctx.attrs.get("binary_output"):
        raise NotApplicable("a binary bincount adds nothing up (it is deterministic already)")
    dtype = weights.dtype if weights.shape.num_elements() != 0 else ctx.attrs["T"]
    w = weights if weights.shape.num_elements() != 0 else tf.ones_like(values, dtype)
    size = tf.cast(size, tf.int64)
    v = tf.cast(values, tf.int64)
    if values.shape.rank == 2:  # one count per row: row r's bins are r*size ... r*size+size-1
        row = tf.range(tf.shape(v, out_type=tf.int64)[0])[:, None]
        flat = tf.where((v >= 0) & (v < size), row * size + v, -1)
        counts = segment_sum(tf.reshape(w, [-1]), tf.reshape(flat, [-1]), tf.shape(v, out_type=tf.int64)[0] * size,
                             ctx)
        return [tf.reshape(counts, [-1, size])]
    v = tf.where((v >= 0) & (v < size), v, -1)  # dropped, as bincount drops values past `size`
    return [segment_sum(tf.reshape(w, [-1]), tf.reshape(v, [-1]), size, ctx)]
