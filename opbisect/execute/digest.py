"""Digests of a training's state that two runs of a script can be compared by: what a user would print by hand
(`sum(model.get_weights())`), bit for bit. `opbisect run` prints one at the end and, with `--digests`, writes one
per variable after every training step; `opbisect fix` compares two fresh runs by them.

A numeric variable's digest is capture's position-weighted sum of its bits (capture/fingerprint.py), computed where
the variable lives, every variable in one call: 8 bytes each come back to the host, not the variable. Copied and
hashed there, BERT-base's weights and Adam's slots (624 MB) would take about a second a step (blake2b hashed 0.3 GB
a second on this project's CPU machine; not timed on a GPU), and the user's test runs 100 steps twice. Any other
variable's (a string's) is blake2b over its dtype, shape and bytes, on the host. Both are functions of the bits
alone: the same on every device and in every process, so two processes' digests compare directly. Variables are
keyed as the trace keys them (their name, and `#2`, `#3`... in creation order where names repeat): stable across
processes.
"""

from __future__ import annotations

import hashlib

from ..digests import value_bytes

SIZE = 8  # bytes: 16 hex digits


def value_digest(value) -> str:
    return hashlib.blake2b(value_bytes(value), digest_size=SIZE).hexdigest()


def per_variable(variables: list) -> dict[str, str]:
    """{key: digest} of tf.Variables, keyed stably across processes."""
    from ..trace.trace import variable_keys

    keys = variable_keys(variables)
    return dict(zip((keys[id(v)] for v in variables), of_variables(variables)))


def of_variables(variables: list) -> list[str]:
    """Each variable's digest, in order: the numeric ones' weighted sums in one call, the others' on the host."""
    import tensorflow as tf

    kinds = [tf.as_dtype(v.dtype) for v in variables]
    summed = [i for i, k in enumerate(kinds) if k.is_floating or k.is_integer or k.is_bool]
    sums = _weighted_sums([variables[i] for i in summed]) if summed else []
    digests = {i: f"{int(s) & _MASK:016x}" for i, s in zip(summed, sums)}  # as an unsigned 64-bit word
    return [digests[i] if i in digests else value_digest(v.numpy()) for i, v in enumerate(variables)]


_MASK = (1 << 64) - 1
_SUMMERS: dict = {}  # the ids of a list of variables -> the tf.function that sums them (a training step's, reused)


def _weighted_sums(variables: list):
    """int64 numpy array: each variable's weighted sum, computed on its device by one tf.function per list."""
    import tensorflow as tf

    from ..capture.fingerprint import WeightedSumFingerprinter

    key = tuple(id(v) for v in variables)
    if key not in _SUMMERS:
        one = WeightedSumFingerprinter().one
        _SUMMERS[key] = tf.function(lambda: tf.stack([one(tf.convert_to_tensor(v)) for v in variables]))
    return _SUMMERS[key]().numpy()


def combined(digests: dict[str, str]) -> str:
    """One digest of many: of each key and its digest, in key order."""
    h = hashlib.blake2b(digest_size=SIZE)
    for key in sorted(digests):
        h.update(f"{key}={digests[key]};".encode())
    return h.hexdigest()


def first_apart(a: list[dict], b: list[dict]) -> tuple[int, list[str]] | None:
    """Two runs' per-step digests ([{key: digest}] from the state at the training call, step 0, on): the first
    step after which they differ and the variables that differ there (the keys only one run has count), or None
    where every step both ran agrees."""
    for step, (x, y) in enumerate(zip(a, b)):
        apart = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
        if apart:
            return step, apart
    return None
