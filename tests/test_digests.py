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
