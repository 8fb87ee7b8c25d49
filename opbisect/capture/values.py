"""Whole values of tensors inside loop and branch bodies, for replaying a source there alone.

A body's tensors are digested inside the body (capture.regions): only digests leave it. For a source inside a body
the replay needs its inputs themselves, each at one execution of the body (`tensor id@k`: its k-th execution in
the step, as the taps count them). Two ways out of a body:
- threaded (a step compiled with XLA): each wanted value is a slot, threaded through every loop and branch op
  around its body like the digest matrices: zeros at the top level, replaced by the tensor at execution k, passed
  through unchanged everywhere else. The step runs as it is, under XLA: the same branches taken, the same numbers
  (run without XLA, a mixed-precision step overflowed where the compiled one did not, and skipped the branch
  holding the source). Each slot starts as zeros of its value's shape. Where tracing left a shape open (a Keras
  step's batch dimension), a first run (a probe) threads out each value's shape instead, and the values are then
  built to the shapes it saw; past MAX_RANK dimensions, the other way:
- handed to the host by a tf.numpy_function at execution k. XLA cannot compile that callback: a step that
  compiles with XLA then runs without it, and the replay says so.
"""

from __future__ import annotations

import numpy as np

from ..ir.ids import TensorRef

MAX_RANK = 8  # the dimensions a probe carries per value


class UnfixedShape(Exception):
    """A threaded slot's tensor has no fixed shape where the step was traced, or more dimensions than a probe
    carries."""


class BodyValues:
    """The tensors to take (ids with their execution, `op:0@k`), and per run what was taken."""

    def __init__(self, wanted: list[str], threaded: bool = False, probe: bool = False,
                 known: dict[str, list[int]] | None = None):
        """`probe`: the slots carry each value's shape (int64: its rank, then its dimensions), not the value.
        `known`: the values' shapes, as a probe saw them."""
        self.wanted: dict[str, list[TensorRef]] = {}
        for t in dict.fromkeys(wanted):
            ref = TensorRef.parse(t)
            self.wanted.setdefault(ref.region, []).append(ref)
        self.threaded, self.probe, self.known = threaded or probe, probe, known or {}
        self.shapes: dict[str, object] = {}  # threaded: each slot's static shape, as its body was traced
        self.runs: list[dict[str, np.ndarray]] = []

    def tensors(self, region: str) -> list[str]:
        """The tensor ids (without execution) a body hands over, in order."""
        return list(dict.fromkeys(str(r.at(None)) for r in self.wanted.get(region, [])))

    def slots(self, regions: list[str]) -> list[str]:
        """Threaded: the slots (`op:0@k`) of the values taken in `regions`, in order; none otherwise."""
        return [str(ref) for r in regions for ref in self.wanted.get(r, [])] if self.threaded else []

    def start_run(self) -> None:
        self.runs.append({})

    def fill(self, region: str, index, tensors: list, came: dict) -> dict:
        """Threaded, in the rebuilt body of `region` being traced: each of its slots (in `came`, as they come in)
        becomes its tensor (of `tensors`, its `tensors(region)` in order) at the execution it names (`index`,
        an int64 scalar tensor), and stays as it came at any other. The slots as they go out."""
        import tensorflow as tf

        by_id = dict(zip(self.tensors(region), tensors))
        out = {}
        for ref in self.wanted[region]:
            slot, value = str(ref), by_id[str(ref.at(None))]
            if self.probe:  # [rank, dimensions..., zeros]: a fixed length, whatever tracing left open
                dims = tf.shape(value, out_type=tf.int64)
                value = tf.concat([tf.size(dims, out_type=tf.int64)[None], dims, tf.zeros([MAX_RANK], tf.int64)], 0)
                value = tf.reshape(value[:MAX_RANK + 1], [MAX_RANK + 1])
            elif slot in self.known:
                value = tf.ensure_shape(value, self.known[slot])
            self.shapes[slot] = value.shape
            out[slot] = tf.where(tf.equal(index, ref.iteration), value, came[slot])
        return out

    def dtype(self, slot: str, graph):
        """The slot's dtype: its tensor's in `graph` (a probe's: int64, a shape)."""
        import tensorflow as tf

        return tf.int64 if self.probe else tf.as_dtype(graph.dtype(str(TensorRef.parse(slot).at(None))))

    def probed(self) -> dict[str, list[int]]:
        """A probe's: the shape of each value its last run saw (those whose body ran at that execution)."""
        known = {}
        for slot, shape in self.runs[-1].items():
            rank = int(shape[0])
            if rank > MAX_RANK:
                raise UnfixedShape(f"{slot} has {rank} dimensions, more than a probe carries ({MAX_RANK})")
            known[slot] = [int(n) for n in shape[1:1 + rank]]
        return known

    def shape(self, slot: str) -> list[int]:
        """The slot's shape, as its body was traced (the top level starts it as zeros of that shape)."""
        shape = self.shapes.get(slot)
        if shape is None or not shape.is_fully_defined():
            raise UnfixedShape(f"{slot} has no fixed shape ({shape})")
        return shape.as_list()

    def keep(self, slots: dict[str, np.ndarray], executions: dict[str, int]) -> None:
        """Threaded, after a run: each slot's value, where its body ran that execution (`executions`: per
        body, how many times it ran in the run)."""
        run = self.runs[-1]
        for slot, value in slots.items():
            ref = TensorRef.parse(slot)
            if executions.get(ref.region, 0) > ref.iteration:
                run[slot] = value

    def take(self, region: str, index, tensors: list) -> None:
        """In the rebuilt body of `region` being traced: at each execution (`index`, an int64 scalar tensor) hand
        `tensors` (its `tensors(region)`, in order) to the host, which keeps those wanted at that execution."""
        import tensorflow as tf

        refs = self.wanted[region]
        position = {t: j for j, t in enumerate(self.tensors(region))}

        def keep(at, *arrays):
            run = self.runs[-1] if self.runs else {}
            for ref in refs:
                if ref.iteration == int(at):
                    run[str(ref)] = np.array(arrays[position[str(ref.at(None))]])
            return np.zeros([], np.int8)

        tf.numpy_function(keep, [index, *tensors], tf.int8, stateful=True, name="opbisect_capture_values")
