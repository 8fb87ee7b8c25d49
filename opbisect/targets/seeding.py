"""Sources of randomness (ir/randomness.py) pinned in a fresh process before the user's script runs, one at a time
(the fresh-process check's experiment, execute/fresh.py) or all that Keras seeds together (`opbisect run --seed N`,
what `fix` recommends).

Each pin seeds its source where the script cannot have yet: Python's `random` and NumPy's global generator at
once, TensorFlow's global seed and each Keras line's seed when the script imports them (targets/imports.py). A
script that seeds a source itself re-seeds it, as it would without opbisect. `hash` is PYTHONHASHSEED, which Python
reads when it starts: the parent sets it in the child's environment (`environment`).
"""

from __future__ import annotations

import contextlib
import os
import random

KERAS = "keras"  # every source keras.utils.set_random_seed seeds, and Keras' own global generator


def environment(pins: set[str], seed: int, env: dict) -> dict:
    """The child's environment: PYTHONHASHSEED where `hash` is pinned, else the user's own (unset stays unset)."""
    return {**env, "PYTHONHASHSEED": str(seed)} if "hash" in pins else dict(env)


@contextlib.contextmanager
def pinned(pins: set[str], seed: int):
    """Within (the script runs): the sources `pins` names seeded with `seed` (`keras`: every one of them, as
    keras.utils.set_random_seed does, for each Keras line the script imports)."""
    from .imports import when_imported

    every = KERAS in pins
    if every or "python" in pins:
        random.seed(seed)
    callbacks = {}
    if every or "numpy" in pins:
        callbacks["numpy"] = lambda np: np.random.seed(seed)
    if every or "tensorflow" in pins or "tfdata" in pins:
        callbacks["tensorflow"] = lambda tf: _tensorflow(tf, pins, seed)
    if every:
        for line in ("keras", "tf_keras"):
            callbacks[line] = lambda keras: keras.utils.set_random_seed(seed)
    if "hash" in pins and os.environ.get("PYTHONHASHSEED") != str(seed):
        raise RuntimeError("PYTHONHASHSEED is read when Python starts: pin it in the child's environment")
    with when_imported(callbacks):
        yield


def _tensorflow(tf, pins: set[str], seed: int) -> None:
    if KERAS in pins or "tensorflow" in pins:
        tf.random.set_seed(seed)
    if "tfdata" in pins:
        tf.config.experimental.enable_op_determinism()  # makes every tf.data stage deterministic, as its docs say


def seeded(seed: str) -> tuple:
    """What `--seed N` runs the script under ("": nothing): every seed pinned, as keras.utils.set_random_seed(N) at
    the script's top would."""
    return (pinned({KERAS}, int(seed)),) if seed else ()
