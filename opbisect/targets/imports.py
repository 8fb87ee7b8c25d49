"""Work that waits for a module the user's script imports: opbisect imports no TensorFlow and no Keras of its own
before the script has run its top-level imports.

Why: TensorFlow picks the Keras behind `tensorflow.keras` from `TF_USE_LEGACY_KERAS` when `tensorflow` is first
imported (its package path) and when `tf.keras` is first touched (a lazy loader). A script that sets the variable
at its top, as the TensorFlow docs' tf_keras notebooks do, gets Keras 3 instead when a tool imported TensorFlow
before it. So the hooks on TensorFlow and on each Keras line (targets/intercept.py) and TensorFlow's setup
(execute/prepared.py) are attached when the script's own import of that module has finished, or at once where it
was imported already.

    with when_imported({"tensorflow": setup, "keras": hook, "tf_keras": hook}):
        runner.run()          # `import tensorflow` in the script: TensorFlow starts, then setup(tensorflow) runs
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Callable


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a watched top-level module it asks the other finders, then makes the loader call
    back once the module's code has run in full."""

    def __init__(self, callbacks: dict[str, Callable], around: dict[str, Callable]):
        self.callbacks, self.around = callbacks, around
        self.asking = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.callbacks or self.asking:
            return None
        self.asking = True  # importlib.util.find_spec walks sys.meta_path again, this finder included
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self.asking = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        _call_back_after(spec.loader, self.callbacks[fullname], self.around.get(fullname, contextlib.nullcontext))
        return spec


def _call_back_after(loader, callback: Callable, around: Callable) -> None:
    """The loader runs the module's code within `around()`, then `callback(module)` (an instance attribute: the
    loader keeps its type, which importlib.resources and pkgutil look at)."""
    run = loader.exec_module  # another watch's wrapper, where two watch one module

    def exec_module(module):
        loader.exec_module = run  # once: what was there before
        with around():
            run(module)
        callback(module)

    loader.exec_module = exec_module


@contextlib.contextmanager
def when_imported(callbacks: dict[str, Callable], around: dict[str, Callable] | None = None):
    """Within: `callbacks[name](module)` runs once the top-level module `name` has been imported in full (at once
    for one imported already); its import runs within `around[name]()` (a context manager factory) where given. A
    module imported while the block runs keeps whatever its callback did to it."""
    pending = {}
    for name, callback in callbacks.items():
        module = sys.modules.get(name)
        if module is not None and getattr(getattr(module, "__spec__", None), "_initializing", False) is False:
            callback(module)
        else:
            pending[name] = callback
    finder = _Finder(pending, around or {})
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(finder)
