"""Whole values of tensors inside loop and branch bodies, for replaying a source there alone.

A body's tensors are digested inside the body (capture.regions): only digests leave it. For a source inside a body
the replay needs its inputs themselves, so a rebuilt body can also hand chosen tensors to the host through a
tf.numpy_function, each at one execution of the body (`tensor id@k`: its k-th execution in the step, as the taps
count them). The callback keeps them here. A numpy_function cannot be compiled by XLA: the pass that records runs
the step without XLA (the replay runs the op alone as a TensorFlow kernel in any case), and the replay says so.
"""

from __future__ import annotations

import numpy as np

from ..ir.ids import TensorRef


class BodyValues:
    """The tensors to take (ids with their execution, `op:0@k`), and per run what was taken."""

    def __init__(self, wanted: list[str]):
        self.wanted: dict[str, list[TensorRef]] = {}
        for t in dict.fromkeys(wanted):
            ref = TensorRef.parse(t)
            self.wanted.setdefault(ref.region, []).append(ref)
        self.runs: list[dict[str, np.ndarray]] = []

    def tensors(self, region: str) -> list[str]:
        """The tensor ids (without execution) a body hands over, in order."""
        return [str(r.at(None)) for r in self.wanted.get(region, [])]

    def start_run(self) -> None:
        self.runs.append({})

    def take(self, region: str, index, tensors: list) -> None:
        """In the rebuilt body of `region` being traced: at each execution (`index`, an int64 scalar tensor) hand
        `tensors` (its `tensors(region)`, in order) to the host, which keeps those wanted at that execution."""
        import tensorflow as tf

        refs = self.wanted[region]

        def keep(at, *arrays):
            run = self.runs[-1] if self.runs else {}
            for ref, a in zip(refs, arrays):
                if ref.iteration == int(at):
                    run[str(ref)] = np.array(a)
            return np.zeros([], np.int8)

        tf.numpy_function(keep, [index, *tensors], tf.int8, stateful=True, name="opbisect_capture_values")
