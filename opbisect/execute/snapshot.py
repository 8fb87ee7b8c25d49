"""Snapshot and restore of the step's state (its variables), on the device the variables live on.

A restore writes every variable back. Tracing one function that does it in one call costs about 1.7 ms a
variable (4 s at 2400 variables), and each call then 5 us a variable; an eager assign costs 16 us a variable
(measured on the 2-core CPU machine). Both grow with the variable count, so tracing pays after about 100 restores
whatever the count, and a `--runs 5` experiment restores about 16 times. So the first EAGER_RESTORES restores of a
set of variables are eager and the later ones traced: as in renting until the rent paid equals the price, never
more than twice the cost of the better choice made in hindsight.
"""

from __future__ import annotations

EAGER_RESTORES = 100

_RESTORERS: dict[tuple, object] = {}  # one traced restore per set of variables, shared by every snapshot of it
_RESTORED: dict[tuple, int] = {}  # restores so far, per set of variables


def _restorer(variables: list, values: list):
    """A concrete function writing values (its flat arguments) into `variables`: traced once, whatever the
    snapshot (every snapshot of a set of variables has their shapes and dtypes)."""
    import tensorflow as tf

    def restore(values):
        for v, value in zip(variables, values):
            v.assign(value)

    return tf.function(restore, autograph=False).get_concrete_function(values)


class Snapshot:
    """Holds a copy of every variable's value and writes them all back, then starts the step's seeded random ops
    anew (`restart`, an execute.seeded.Restart: their state variables are among `variables`, the others need their
    kernels cleared)."""

    def __init__(self, variables: dict, restart=None):
        import tensorflow as tf

        self.restart = restart
        self.source = variables
        self.keys = sorted(variables)
        self.expected: dict[str, int] | None = None  # fingerprints once restored (set by the first restore)
        self.variables = [variables[k] for k in self.keys]
        # read_value() copies: a later assign to the variable does not touch the saved tensor.
        self.saved = [tf.identity(v.read_value()) for v in self.variables]
        # a variable may change shape: a traced restore serves the snapshots whose values have its shapes
        self._set = tuple((id(v), tuple(x.shape)) for v, x in zip(self.variables, self.saved))

    def now(self) -> "Snapshot":
        """A snapshot of the same variables as they are now, restarting the same ops."""
        return Snapshot(self.source, self.restart)

    def restore(self) -> None:
        if self.restart is not None:
            self.restart.before_run()
        self._write_back()

    def _write_back(self) -> None:
        from ..graphdef.importer import UNOPTIMIZED
        from ..tfcompat import call_flat, grappler_options

        if not self.variables:
            return
        _RESTORED[self._set] = done = _RESTORED.get(self._set, 0) + 1
        if done <= EAGER_RESTORES:
            self._assign_eagerly()
            return
        if self._set not in _RESTORERS:
            if len(_RESTORERS) >= 4:  # a process traces one step at a time: keep the latest few, free the rest
                _RESTORERS.pop(next(iter(_RESTORERS)))
            _RESTORERS[self._set] = _restorer(self.variables, self.saved)
        with grappler_options(UNOPTIMIZED):  # our own function: nothing for grappler to gain
            call_flat(_RESTORERS[self._set], self.saved)

    def _assign_eagerly(self) -> None:
        from ..tfcompat import assign_now

        for v, value in zip(self.variables, self.saved):
            assign_now(v, value)
