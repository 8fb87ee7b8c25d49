"""Where each variable of the user's script is made: the line of the script, and the Keras layer and initializer
where a layer makes it. The fresh-process check names these for the variables whose value differs between two
fresh processes (the kind `init` sources): the line where the remedy goes."""

from __future__ import annotations

import contextlib
import functools
import sys
from pathlib import Path

from .. import tfcompat
from ..record.model import Made


class Creation:
    """Records every tf.Variable made while the script runs (from when it imports TensorFlow on)."""

    def __init__(self, script: Path):
        self.script = str(Path(script).resolve())
        self.made: dict[int, Made] = {}  # id(variable) -> where and by what it was made
        self.kept: list = []  # the variables themselves: an id stays theirs while they live

    @contextlib.contextmanager
    def recording(self):
        from .imports import when_imported

        with contextlib.ExitStack() as stack:
            def on_tensorflow(tf):
                stack.enter_context(tfcompat.variable_creator(self._creator))

            with when_imported({"tensorflow": on_tensorflow}):
                yield

    def _creator(self, next_creator, **kwargs):
        variable = next_creator(**kwargs)
        frames = _frames(sys._getframe(1))
        site = next((f"{Path(f.f_code.co_filename).name}:{f.f_lineno}" for f in frames
                     if _resolved(f.f_code.co_filename) == self.script), "")
        self.made[id(variable)] = Made(site, tfcompat.weight_maker(frames))
        self.kept.append(variable)
        return variable

    def of(self, variables: dict) -> dict[str, Made]:
        """{key: where it was made} for the variables (by key) that were made while recording."""
        return {key: self.made[id(v)] for key, v in variables.items() if id(v) in self.made}


def _frames(frame) -> list:
    out = []
    while frame is not None:
        out.append(frame)
        frame = frame.f_back
    return out


@functools.lru_cache(maxsize=4096)  # a frame's file, once per file
def _resolved(filename: str) -> str:
    try:
        return str(Path(filename).resolve())
    except (OSError, RuntimeError):
        return filename
