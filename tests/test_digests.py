"""A value's digest is the same in every process that holds the same value, and differs where the value does: what
the fresh-process check, `opbisect run --digests` and a replay alone compare by."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from opbisect.execute.digest import value_digest
from opbisect.replay.rerun import digest

from conftest import ROOT, child_env


def _strings(*words: str) -> np.ndarray:
    """A string tensor as TensorFlow hands it to NumPy: an object array of bytes, each a new object."""
    return np.array([bytes(bytearray(w.encode())) for w in words], dtype=object)


def test_equal_strings_digest_the_same_whatever_objects_hold_them():
    a, b = _strings("a b c", "", "tokens"), _strings("a b c", "", "tokens")
    assert a[0] is not b[0]
    assert value_digest(a) == value_digest(b) and digest([a]) == digest([b])
    assert value_digest(_strings("a b c", "", "tokenz")) != value_digest(a)
    assert value_digest(_strings("ab", "c")) != value_digest(_strings("a", "bc"))  # where one item ends counts


def test_a_string_digest_is_the_same_in_a_fresh_process():
    code = ("import numpy as np; from opbisect.execute.digest import value_digest; "
            "print(value_digest(np.array([b'a b c', b'', b'tokens'], dtype=object)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), cwd=ROOT,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == value_digest(_strings("a b c", "", "tokens"))


def test_dtype_shape_and_contents_each_count():
    base = np.zeros((2, 3), np.float32)
    others = [np.zeros((2, 3), np.int32), np.zeros((3, 2), np.float32), np.zeros((0, 4), np.float32),
              base + np.float32(1e-30)]
    assert len({value_digest(base), *map(value_digest, others)}) == 1 + len(others)
    assert value_digest(np.float32(np.nan)) == value_digest(np.float32(np.nan))  # the same bits, the same digest


def test_a_variables_digest_is_its_weighted_sum_and_moves_with_any_one_bit_and_only_its_own():
    """The per-step digests (the user's test, `run --digests`) are computed where each variable lives, all in one
    call: capture's weighted sum of the bits for a numeric variable, blake2b on the host for a string one."""
    import tensorflow as tf

    from opbisect.capture.fingerprint import WeightedSumFingerprinter
    from opbisect.execute.digest import of_variables

    def made():
        return [tf.Variable(np.linspace(-1, 1, 600, dtype=np.float32).reshape(20, 30)),
                tf.Variable(np.zeros(4, np.float32)), tf.Variable(np.int64(7)), tf.Variable([b"a", b"b"])]

    first, second = made(), made()
    digests = of_variables(first)
    assert digests == of_variables(second) and len(set(digests)) == 4  # equal values, other variables: one digest
    assert int(digests[0], 16) == int(WeightedSumFingerprinter().one(first[0].value())) % 2**64
    assert digests[3] == value_digest(first[3].numpy())
    second[0].assign(tf.tensor_scatter_nd_update(second[0], [[7, 11]], [np.nextafter(second[0][7, 11].numpy(),
                                                                                     np.float32(2))]))
    second[1].assign(-second[1])  # -0.0: equal to 0.0, other bits
    moved = of_variables(second)
    assert [a != b for a, b in zip(digests, moved)] == [True, True, False, False]
