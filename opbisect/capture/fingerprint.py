"""Fingerprints: exact, bitwise, cheap digests of tensors, computed where the tensors live.

This module is the device seam: everything device-specific about capture is choosing a Fingerprinter.

- `FarmhashFingerprinter` (CPU, the default under FUSED_ON_CPU_FROM_TAPS taps): `tf.fingerprint` over each
  tensor's bytes; CPU kernel only.
- `WeightedSumFingerprinter` (any device; under XLA): the sum over elements of (bits as int64) x (an odd,
  position-dependent weight), wrapping mod 2^64. Integer addition wraps and commutes, so the result does not
  depend on the order a parallel reduction adds in; any single-element change moves it (an odd weight is
  invertible mod 2^64), and it never leaves the device.
- `FusedFingerprinter` (GPU; CPU steps from FUSED_ON_CPU_FROM_TAPS taps): the same function through one custom op
  over many tensors (opbisect/kernels, compiled on first use and cached): one CUDA launch per 96 tensors instead
  of several TensorFlow kernels per tensor, and on a CPU one node per group of taps instead of two per tap.

Both give one int64 per tensor and both depend on the element count (farmhash on the byte length, the sum
through a size term), so a shorter or longer result differs. The shape itself is not folded in: a result that
differs only by a reshape to the same element count with the same bytes is not seen (folding it in cost ten
nodes per dynamically shaped tap, a third of all taps in a Keras step, and made grappler several times slower).

A fingerprinter is written once in TensorFlow ops (`row`: the digest as a [1, 8] uint8 row, so that many rows
concatenate and bitcast to int64 once); `template` traces it into a small GraphDef per dtype that capture
stamps next to every tapped tensor (copying protobufs is far faster than creating thousands of ops from Python,
and fewer nodes per tap keep grappler's time down). Under XLA, where grappler does not run but every reduction is
compiled on its own, the step's taps are instead digested together after the import by the weighted sum's `many`,
one reduction per tensor size.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

SKIPPED_DTYPES = ("resource", "variant", "string")

_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15 as a signed int64: odd, well-mixed bits
_SIZE_MIX = 0x27D4EB2F165667C5


def tappable(dtype_name: str) -> bool:
    return dtype_name not in SKIPPED_DTYPES


def _as_bits(t):
    """Reinterpret any numeric tensor as a flat signed integer tensor of the same width."""
    import tensorflow as tf

    if t.dtype == tf.bool:
        t = tf.cast(t, tf.uint8)
    width = {1: tf.int8, 2: tf.int16, 4: tf.int32, 8: tf.int64}
    if t.dtype.is_complex:  # its real and imaginary words as in memory (XLA cannot bitcast a complex tensor)
        t = tf.bitcast(tf.stack([tf.math.real(t), tf.math.imag(t)], -1), tf.int64)
    elif t.dtype not in width.values():
        t = tf.bitcast(t, width[t.dtype.size])
    return tf.reshape(t, [-1])


@dataclasses.dataclass(frozen=True)
class Template:
    """A traced fingerprint subgraph: `nodes` read placeholder `source`; `output` is the [1, 8] uint8 row."""

    nodes: tuple  # NodeDefs
    source: str
    output: str


class Fingerprinter:
    key = "base"  # what --fingerprint calls it
    name = "base"
    fused = False  # True: digests many tensors in one node (`many`), no per-tap template
    side_stream = False  # True: the fused op reads on a second CUDA stream (FusedFingerprinter)
    host_dtypes: frozenset = frozenset()  # dtypes digested by a node on the CPU (see FusedFingerprinter)

    def split(self, dtype_names) -> tuple[list[int], list[int]]:
        """Positions of the tensors digested on the device, and of those digested on the host."""
        device, host = [], []
        for i, name in enumerate(dtype_names):
            (host if name in self.host_dtypes else device).append(i)
        return device, host

    def one(self, t):
        """int64 scalar digest of one tensor's bits (built in the current graph)."""
        raise NotImplementedError

    def row(self, t):
        """The digest as a [1, 8] uint8 row."""
        import tensorflow as tf

        return tf.reshape(tf.bitcast(self.one(t), tf.uint8), [1, 8])

    @functools.cache  # noqa: B019 - fingerprinters are few and live for the process
    def template(self, dtype_name: str) -> Template:
        import tensorflow as tf

        g = tf.Graph()
        with g.as_default():
            x = tf.compat.v1.placeholder(tf.as_dtype(dtype_name), name="x")
            out = self.row(x)
        nodes = tuple(n for n in g.as_graph_def().node if n.name != "x")
        return Template(nodes=nodes, source="x", output=out.name)

    def many(self, tensors):
        """int64[len(tensors)] digests, built with ops in the current graph (for small sets: the state)."""
        import tensorflow as tf

        if not tensors:
            return tf.zeros([0], tf.int64)
        rows = [self.row(t) for t in tensors]
        while len(rows) > 1:  # a tree of small concats: grappler slows down sharply on one node of many inputs
            rows = [tf.concat(rows[i:i + 32], 0) for i in range(0, len(rows), 32)]
        return tf.reshape(tf.bitcast(rows[0], tf.int64), [-1])


class FarmhashFingerprinter(Fingerprinter):
    key = "farmhash"
    name = "farmhash64 (tf.fingerprint, CPU)"

    def one(self, t):
        import tensorflow as tf

        return tf.reshape(tf.bitcast(self.row(t), tf.int64), [])

    def row(self, t):
        # Two nodes per tap (Reshape, Fingerprint): farmhash already gives the 8-byte row.
        import tensorflow as tf

        if t.dtype == tf.bool:
            t = tf.cast(t, tf.uint8)
        return tf.raw_ops.Fingerprint(data=tf.expand_dims(t, 0), method="farmhash64")


class WeightedSumFingerprinter(Fingerprinter):
    key = "wsum"
    name = "int64 position-weighted wrap-around sum"

    def one(self, t):
        import tensorflow as tf

        bits = tf.cast(_as_bits(t), tf.int64)
        n = tf.size(bits, out_type=tf.int64)
        weights = (tf.range(n, dtype=tf.int64) * 2 + 1) * _GOLDEN  # odd x odd = odd, wraps mod 2^64
        return tf.reduce_sum(bits * weights) + n * _SIZE_MIX

    def many(self, tensors):
        """`one` of each tensor, bit for bit, with one reduction per element count and width instead of one per
        tensor: the tensors whose size is known when traced are stacked by (size, width), each stack reduced along
        its rows. Under XLA every reduction is compiled on its own: 800 tensors of six shapes, fingerprinted in
        one jit-compiled function on the CPU machine, compiled in 52 s one by one and in 9 s grouped. Tensors of
        one dtype and shape are stacked as they are and reinterpreted as bits once: no op per tensor (two each
        before, 4500 ops to build for a small BERT-like step's 2224 taps)."""
        import tensorflow as tf

        tensors = list(tensors)
        if not tensors:
            return tf.zeros([0], tf.int64)
        alike: dict = {}
        for i, t in enumerate(tensors):
            alike.setdefault(("alike", t.dtype, tuple(t.shape)) if t.shape.is_fully_defined() else ("one", i),
                             []).append(i)
        parts, order, groups = [], [], {}
        for key, members in alike.items():
            if key[0] == "one":  # its size is known only when it runs
                parts.append(tf.reshape(self.one(tensors[members[0]]), [1]))
                order += members
                continue
            bits = _as_bits(tf.stack([tensors[i] for i in members]))  # the tensors' bits, one after the other
            n = bits.shape.num_elements() // len(members)
            groups.setdefault((n, bits.dtype), []).append((members, tf.reshape(bits, [len(members), n])))
        for (n, _), stacks in groups.items():
            stacked = tf.cast(tf.concat([rows for _, rows in stacks], 0) if len(stacks) > 1 else stacks[0][1],
                              tf.int64)  # [k, n]
            weights = (tf.range(n, dtype=tf.int64) * 2 + 1) * _GOLDEN
            parts.append(tf.reduce_sum(stacked * weights, axis=1) + tf.constant(n, tf.int64) * _SIZE_MIX)
            order += [i for members, _ in stacks for i in members]
        digests = tf.concat(parts, 0) if len(parts) > 1 else parts[0]
        return digests if order == sorted(order) else tf.gather(digests, np.argsort(order))


class FusedFingerprinter(Fingerprinter):
    key = "fused"
    name = "int64 position-weighted wrap-around sum, fused op (one launch per 96 tensors)"
    fused = True

    def __init__(self, cuda: bool, side_stream: bool = False):
        from .. import kernels

        self.module = kernels.load(cuda)  # raises kernels.BuildError
        # On a GPU the reads on a second CUDA stream, beside the step's kernels (kernels/side_stream.h): the
        # digests are the same; what it costs is measured by benchmarks/capture_overhead.py, not yet on a GPU.
        self.side_stream = side_stream
        if side_stream:
            self.key, self.name = SIDE_STREAM, f"{self.name}, read on a second CUDA stream"
        # On a GPU, TensorFlow keeps int32 tensors in host memory: digest those on the CPU.
        self.host_dtypes = frozenset({"int32"}) if cuda else frozenset()

    def many(self, tensors):
        import tensorflow as tf

        tensors = list(tensors)
        if not tensors:
            return tf.zeros([0], tf.int64)
        on_device, on_host = self.split([t.dtype.name for t in tensors])
        if not on_host:
            return self._on_device(tensors)
        parts = []
        if on_device:
            parts.append(self._on_device([tensors[i] for i in on_device]))
        with tf.device("/device:CPU:0"):
            parts.append(self.module.opbisect_fingerprint([tensors[i] for i in on_host]))
        return tf.gather(tf.concat(parts, 0), np.argsort(on_device + on_host))  # back to the tensors' order

    def _on_device(self, tensors):
        digests = self.module.opbisect_fingerprint(tensors, side_stream=self.side_stream)
        return self.module.opbisect_await_digests([digests])[0] if self.side_stream else digests


# From this many taps a CPU step is fingerprinted by the fused op (one node per group of taps) instead of farmhash
# (two nodes per tap): grappler and the first call see a tapped graph a third the size. Measured on the 2-core CPU
# with lean taps (benchmarks/README.md, Capture overhead): whole `opbisect trace --runs 5` of a deep MLP (small
# tensors), farmhash against the op, 9.4 / 8.9 s at 102 taps, 13.7 / 11.9 at 502, 28.0 / 21.2 at 1,602; the
# BERT-like step's 183 large taps, a call 1.02x the plain step with farmhash against 1.40x with the op (then read on
# one thread; read in pieces on every core since, the op alone still reads 16 MB tensors at 6.4-7.1 GB/s against
# farmhash's 9.1-10.3). At 500 the two are within 2 s on those steps either way.
FUSED_ON_CPU_FROM_TAPS = 500
SIDE_STREAM = "fused-side"  # the fused op reading on a second CUDA stream (FusedFingerprinter.side_stream)


def for_device(device: str, jit: bool = False, choice: str = "auto", taps: int = 0) -> tuple[Fingerprinter, str]:
    """The fingerprinter for a device kind ('cpu' or 'gpu') and a note on the choice.

    `jit`: the step compiles with XLA, so capture must too (no farmhash, no custom op: the weighted sum in
    TensorFlow ops). `choice` forces one: farmhash, wsum, fused or fused-side (SIDE_STREAM). `taps`: how many
    tensors capture fingerprints, which picks the fused op on a CPU from FUSED_ON_CPU_FROM_TAPS.
    """
    from ..kernels import BuildError

    if choice == "farmhash":
        return FarmhashFingerprinter(), ""
    if choice == "wsum" or jit:
        return WeightedSumFingerprinter(), ("the step compiles with XLA" if jit and choice != "wsum" else "")
    large_cpu_step = device == "cpu" and taps >= FUSED_ON_CPU_FROM_TAPS
    if choice == SIDE_STREAM:  # not a command-line choice until a GPU has measured it (benchmarks/README.md)
        return FusedFingerprinter(cuda=device == "gpu", side_stream=True), ""
    if choice == "fused" or device == "gpu" or large_cpu_step:
        try:
            return FusedFingerprinter(cuda=device == "gpu"), ""
        except BuildError as exc:
            if choice == "fused":
                raise
            first = str(exc).splitlines()[0]
            fallback = FarmhashFingerprinter() if large_cpu_step else WeightedSumFingerprinter()
            return fallback, f"the fused op could not be built ({first}): fell back"
    return FarmhashFingerprinter(), ""
