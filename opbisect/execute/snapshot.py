"""Snapshot and restore of the step's state (its variables), on the device the variables live on."""

from __future__ import annotations

_RESTORERS: dict[tuple, object] = {}  # one traced restore per set of variables, shared by every snapshot of it


def _restorer(variables: list, values: list):
    """A concrete function writing values (its flat arguments) into `variables`: traced once, whatever the
    snapshot (every snapshot of a set of variables has their shapes and dtypes)."""
    import tensorflow as tf

    key = tuple((id(v), tuple(x.shape)) for v, x in zip(variables, values))  # a variable may change shape
    if key not in _RESTORERS:
        def restore(values):
            for v, value in zip(variables, values):
                v.assign(value)

        if len(_RESTORERS) >= 4:  # a process traces one step at a time: keep the latest few, free the rest
            _RESTORERS.pop(next(iter(_RESTORERS)))
        _RESTORERS[key] = tf.function(restore, autograph=False).get_concrete_function(values)
    return _RESTORERS[key]


class Snapshot:
    """Holds a copy of every variable's value and writes them all back in one call."""

    def __init__(self, variables: dict):
        import tensorflow as tf

        self.keys = sorted(variables)
        self.expected: dict[str, int] | None = None  # fingerprints once restored (set by the first restore)
        self.variables = [variables[k] for k in self.keys]
        # read_value() copies: a later assign to the variable does not touch the saved tensor.
        self.saved = [tf.identity(v.read_value()) for v in self.variables]
        self._restore = _restorer(self.variables, self.saved) if self.variables else None

    def restore(self) -> None:
        from ..capture.taps import UNOPTIMIZED
        from ..tfcompat import call_flat, grappler_options

        if self.variables:
            with grappler_options(UNOPTIMIZED):  # our own function: nothing for grappler to gain
                call_flat(self._restore, self.saved)
