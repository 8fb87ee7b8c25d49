"""Fingerprints: exact, bitwise, cheap digests of tensors, computed where the tensors live.

This module is the device seam: everything device-specific about capture is choosing a Fingerprinter.

- `FarmhashFingerprinter` (CPU): `tf.fingerprint` over each tensor's bytes. Fastest on CPU; CPU kernel only.
- `WeightedSumFingerprinter` (any device, the GPU one): the sum over elements of (bits as int64) x (an odd,
  position-dependent weight), wrapping mod 2^64. Integer addition wraps and commutes, so the result does not
  depend on the order a parallel reduction adds in; any single-element change moves it (an odd weight is
  invertible mod 2^64), and it never leaves the device.

Both return one int64 per tensor. A tensor whose static shape is not fully known also folds in its shape, so
a reshaped or shorter result with the same bytes still differs.
"""

from __future__ import annotations

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
    if t.dtype.size == 16:  # complex128: two int64 words per element
        t = tf.bitcast(t, tf.int64)
    elif t.dtype not in width.values():
        t = tf.bitcast(t, width[t.dtype.size])
    return tf.reshape(t, [-1])


class Fingerprinter:
    name = "base"

    def one(self, t):
        """int64 scalar digest of one tensor (built in the current graph)."""
        raise NotImplementedError

    def many(self, tensors):
        """int64[len(tensors)] digests; subclasses may batch the work."""
        import tensorflow as tf

        if not tensors:
            return tf.zeros([0], tf.int64)
        return tf.stack([self._with_shape(t, self.one(t)) for t in tensors])

    def _with_shape(self, t, digest):
        import tensorflow as tf

        if t.shape.is_fully_defined():
            return digest
        shape = tf.cast(tf.shape(t), tf.int64)
        mix = tf.reduce_sum(shape * (tf.range(tf.size(shape, out_type=tf.int64)) * 2 + 1)) * _SIZE_MIX
        return digest + mix


class FarmhashFingerprinter(Fingerprinter):
    name = "farmhash64 (tf.fingerprint, CPU)"

    def one(self, t):
        import tensorflow as tf

        if t.dtype == tf.bool:
            t = tf.cast(t, tf.uint8)
        return tf.reshape(tf.bitcast(tf.fingerprint(tf.reshape(t, [1, -1])), tf.int64), [])

    def many(self, tensors):
        import tensorflow as tf

        if not tensors:
            return tf.zeros([0], tf.int64)
        # One [n, 8] uint8 block, bitcast once, rather than a bitcast per tap.
        digests = []
        for t in tensors:
            flat = tf.cast(t, tf.uint8) if t.dtype == tf.bool else t
            fp = tf.fingerprint(tf.reshape(flat, [1, -1]))
            if not t.shape.is_fully_defined():
                fp = tf.bitcast(tf.reshape(self._with_shape(t, tf.reshape(tf.bitcast(fp, tf.int64), [])), [1]),
                                tf.uint8)
            digests.append(fp)
        return tf.reshape(tf.bitcast(tf.concat(digests, 0), tf.int64), [-1])


class WeightedSumFingerprinter(Fingerprinter):
    name = "int64 position-weighted wrap-around sum"

    def one(self, t):
        import tensorflow as tf

        bits = tf.cast(_as_bits(t), tf.int64)
        n = tf.size(bits, out_type=tf.int64)
        weights = (tf.range(n, dtype=tf.int64) * 2 + 1) * _GOLDEN  # odd x odd = odd, wraps mod 2^64
        return tf.reduce_sum(bits * weights) + n * _SIZE_MIX


FINGERPRINTERS = {"farmhash": FarmhashFingerprinter, "wsum": WeightedSumFingerprinter}


def for_device(device: str, jit: bool = False) -> Fingerprinter:
    """The fingerprinter for a device kind ('cpu' or 'gpu'); `jit`: it must compile with XLA (no farmhash)."""
    if device == "gpu" or jit:
        return WeightedSumFingerprinter()
    return FarmhashFingerprinter()
