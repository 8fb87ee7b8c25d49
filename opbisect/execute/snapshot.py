"""Snapshot and restore of the step's state (its variables), on the device the variables live on."""

from __future__ import annotations


class Snapshot:
    """Holds a copy of every variable's value and writes them all back in one call."""

    def __init__(self, variables: dict):
        import tensorflow as tf

        self.keys = sorted(variables)
        self.expected: dict[str, int] | None = None  # fingerprints once restored (set by the first restore)
        self.variables = [variables[k] for k in self.keys]
        # read_value() copies: a later assign to the variable does not touch the saved tensor.
        self.saved = [tf.identity(v.read_value()) for v in self.variables]
        pairs = list(zip(self.variables, self.saved))

        def restore():
            for v, value in pairs:
                v.assign(value)

        self._restore = tf.function(restore, autograph=False)

    def restore(self) -> None:
        if self.variables:
            self._restore()

