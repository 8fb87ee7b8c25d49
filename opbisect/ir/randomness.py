"""The sources of randomness that make two fresh processes of one script start training from different state or
feed it different batches: the one table the fresh-process check pins them by (targets/seeding.py), decides by
(analysis/fresh.py) and words its remedies from (report/).

Each source, in the order the check's experiment tries them (the commonest cause first): what it is, and what a
script does to pin it.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Randomness:
    name: str  # the pin's name (`opbisect trace --pins`, the record's Cause.sources)
    what: str
    why: str  # what draws from it, in the words a remedy uses
    line: str  # the line that pins it in a script ({seed} for the seed)


SOURCES = (
    Randomness("python", "Python's `random`", "Keras' unseeded initializers and layers take their seeds from Python's "
               "`random`, which `np.random.seed` and `tf.random.set_seed` leave alone", "random.seed({seed})"),
    Randomness("numpy", "NumPy's global generator", "`np.random` draws without a seed until `np.random.seed` is "
               "called", "np.random.seed({seed})"),
    Randomness("tensorflow", "TensorFlow's global seed", "unseeded `tf.random` ops, initializers and tf.data shuffles "
               "take their seeds from TensorFlow's global seed, which is drawn anew in every process until "
               "`tf.random.set_seed` is called", "tf.random.set_seed({seed})"),
    Randomness("hash", "PYTHONHASHSEED", "the order of a `set` (and of `hash()` of a string) follows PYTHONHASHSEED, "
               "which Python draws anew in every process unless the environment sets it", "PYTHONHASHSEED={seed}"),
    Randomness("tfdata", "tf.data's determinism", "a parallel stage with deterministic=False yields elements in the "
               "order they finish, which changes from run to run", "deterministic=True"),
)
BY_NAME = {s.name: s for s in SOURCES}
SEEDED_BY_KERAS = ("python", "numpy", "tensorflow")  # what keras.utils.set_random_seed (and `run --seed`) seeds
SEED = 7  # the seed the check pins with, and the one its remedies name
