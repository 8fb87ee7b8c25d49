"""The patch registry: one deterministic replacement per op type, as JAX keeps one rule per primitive.

A patch is a function `build(ctx, *inputs) -> outputs` that computes what the op computes, from the op's own
inputs and attributes, with ops whose result does not depend on thread or atomic order. The rewrite
(opbisect.patches.rewrite) traces it into a function and puts a call to it in place of the named node, so nothing
but the chosen nodes changes, and no Python name is patched.

Where TensorFlow has a family switch (an environment variable read once per process) that makes the op type
deterministic, the patch names it: `opbisect verify` measures it as a variant of its own.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

from ..ir import optypes

SEGMENT_SWITCH = "TF_USE_DETERMINISTIC_SEGMENT_REDUCTIONS"
CUDNN_SWITCH = "TF_CUDNN_DETERMINISTIC"


@dataclasses.dataclass(frozen=True)
class PatchContext:
    """What a patch may read besides its inputs (which carry their static shapes): the node's type and attributes
    (Python values, tf.DType for types), whether the step is compiled by XLA (no dynamic shapes then), and whether
    the node runs on a CPU (where some of TensorFlow's own kernels are order-fixed), and whether a patch may use
    opbisect's own ops (opbisect/kernels) where they can be built."""

    op_type: str
    attrs: dict
    xla: bool
    on_cpu: bool = False  # the node surely runs on a CPU (no GPU visible, or placed on one)
    own_kernels: bool = True  # False: TensorFlow's kernels only (the form used where opbisect's cannot be built)


@dataclasses.dataclass(frozen=True)
class Patch:
    op_type: str
    build: Callable | None  # None: no rewrite exists; only the family switch (if any) helps
    how: str  # one line: why the replacement is deterministic
    switch: str = ""  # TensorFlow's family switch for this op type, when it has one
    exact: bool = False  # bitwise equal to the op on any input (else: equal up to summation order)


PATCHES: dict[str, Patch] = {}


def register(*op_types: str, how: str, switch: str = "", exact: bool = False):
    """Decorator: `build` is the patch of each of `op_types`."""
    def wrap(build: Callable) -> Callable:
        for t in op_types:
            if t in PATCHES:
                raise ValueError(f"two patches for {t}")
            PATCHES[t] = Patch(t, build, how, switch, exact)
        return build
    return wrap


def switch_on(switch: str) -> bool:
    """Whether this process's environment sets `switch`, as TensorFlow reads it (ReadBoolFromEnvVar: "1" or
    "true", any case). TensorFlow reads it once, when the op first runs, so it must be set before that."""
    return bool(switch) and os.environ.get(switch, "").strip().lower() in ("1", "true")


def switches_on() -> list[str]:
    """The family switches this process's environment sets."""
    return [s for s in (SEGMENT_SWITCH, CUDNN_SWITCH) if switch_on(s)]


def switch_only(op_types: tuple[str, ...], switch: str, how: str) -> None:
    """Op types with no rewrite, that a family switch makes deterministic."""
    for t in op_types:
        PATCHES[t] = Patch(t, None, how, switch)


def has_rewrite(op_type: str) -> bool:
    """Whether the patch library replaces ops of this type (a family switch alone does not count)."""
    return op_type in PATCHES and PATCHES[op_type].build is not None


def switch_of(op_type: str) -> str:
    """TensorFlow's family switch that makes ops of this type deterministic (an environment variable), or ''."""
    return PATCHES[op_type].switch if op_type in PATCHES else ""


PATCH_REMEDY = ("or replace only this op: `opbisect verify <script> --patch <report>/sources.csv` measures the "
                "patch against the switch, `opbisect.deterministic(step_or_model, <the CSV>)` applies it")


def switch_remedy(switch: str) -> str:
    return (f"or only its family: {switch}=1 in the environment before TensorFlow starts (`opbisect verify <script> "
            f"--patch <report>/sources.csv` measures it against the global switch)")


def remedy(op_type: str, kind: str) -> str:
    """What to do about a source of this type and kind."""
    if kind in optypes.KIND_REMEDIES:
        return optypes.KIND_REMEDIES[kind]
    fix = PATCH_REMEDY if has_rewrite(op_type) else switch_remedy(switch_of(op_type)) if switch_of(op_type) else ""
    return "; ".join(p for p in (optypes.info(op_type).remedy, fix) if p)
