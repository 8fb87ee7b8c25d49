"""Digests of a training's state that two runs of a script can be compared by: what a user would print by hand
(`sum(model.get_weights())`), bit for bit. `opbisect run` prints one at the end and, with `--digests`, writes one
per variable after every training step; `opbisect fix` compares two fresh runs by them.

A digest is blake2b over a variable's dtype, shape and bytes, copied to the host: the same on every device and
in every process, so two processes' digests compare directly. Variables are keyed as the trace keys them (their
name, and `#2`, `#3`... in creation order where names repeat): stable across processes.
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
    return {keys[id(v)]: value_digest(v.numpy()) for v in variables}


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
