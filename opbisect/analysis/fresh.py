"""The fresh-process check, decided: two fresh processes of the script compared at its training call, and the
cause of a difference named by experiment. Pure: probes in, facts out (execute/fresh.py runs the processes).

A user's own test is two fresh runs of their script. Runs inside one process start from one restored state, so they
cannot see what differs before the training call: initial weights drawn from an unseeded source (Keras' initializers
take their seeds from Python's `random`, which `np.random.seed` and `tf.random.set_seed` leave alone), batches built
in hash order (a vocabulary from a `set`), a pipeline that yields in timing order. Two processes can.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ..ir.optypes import KIND_REMEDIES
from ..ir.randomness import BY_NAME, SEED, SEEDED_BY_KERAS, SOURCES
from ..record.model import Cause, FreshCheck, Made, Probe, Source
from ..words import listed

NUMBERED = re.compile(r"_\d+(?=/|$)")  # Keras' numbering of a name already taken: dense_1 after dense


def paired(a: dict, b: dict) -> list[tuple[str, str]]:
    """(key in a, key in b) of each variable both processes' steps read, in the order the step captures them: by
    name; where the names differ only in Keras' numbering (a process that made a `dense` before the script, as a
    notebook or a test does, names the script's `dense_1`), by that order."""
    if set(a) != set(b) and len(a) == len(b) and all(NUMBERED.sub("", k) == NUMBERED.sub("", m) for k, m in zip(a, b)):
        return list(zip(a, b))
    return [(k, k) for k in a if k in b]


def state_apart(a: Probe, b: Probe) -> list[str]:
    """The variables whose value at the training call differs (of those both processes' steps read), by a's names."""
    return sorted(k for k, m in paired(a.initial, b.initial) if a.initial[k] != b.initial[m])


def _after_apart(a: dict, b: dict) -> bool:
    pairs = paired(a, b)
    return len(pairs) != max(len(a), len(b)) or any(a[k] != b[m] for k, m in pairs)


def batches_apart(a: Probe, b: Probe) -> list[int]:
    """The steps (1-based) whose batch differs."""
    return [k for k, (p, q) in enumerate(zip(a.batches, b.batches), 1) if p != q]


def agree(a: Probe, b: Probe) -> bool:
    """Whether two probes start the training call alike: the state and the batches."""
    return not state_apart(a, b) and not batches_apart(a, b)


def first_result_apart(a: Probe, b: Probe, varies_from: int | None) -> int | None:
    """Where state and batches agree: the first step after which the step's result differs between the processes,
    counted only before the step varies within this process (`varies_from`: there, runs of one process differ
    too)."""
    last = min(a.steps, b.steps) if varies_from is None else min(a.steps, b.steps, varies_from - 1)
    for k in range(1, last + 1):
        if _after_apart(a.after[k - 1], b.after[k - 1]) or a.outputs[k - 1] != b.outputs[k - 1]:
            return k
    return None


def check(mine: Probe, other: Probe, varies_from: int | None, hash_seed: str) -> FreshCheck:
    init = state_apart(mine, other)
    batches = batches_apart(mine, other)
    first = None if init or batches else first_result_apart(mine, other, varies_from)
    theirs = dict(paired(mine.initial, other.initial))
    return FreshCheck(hash_seed=hash_seed, init=init, batches=batches, first_differing_step=first,
                      steps=min(mine.steps, other.steps),
                      created={k: other.created[theirs[k]] for k in init if theirs[k] in other.created})


BATCH_FIRST = ("tensorflow", "hash", "tfdata", "numpy", "python")  # what feeds batches, most often


def candidates(state_differs: bool) -> list[list[str]]:
    """The sets of sources the experiment pins, in order: each alone, the likeliest first for what differs (the
    state: Keras' initializers and Python's `random`; the batches: a shuffle, hash order, a parallel stage), then the
    first two, three... together."""
    names = [s.name for s in SOURCES] if state_differs else list(BATCH_FIRST)
    return [[n] for n in names] + [names[:k] for k in range(2, len(names) + 1)]


def cause_of(tried: list[list[str]], agreed: list[bool]) -> Cause:
    """The first set whose pinning made the pair agree (the experiment stops there)."""
    found = next((pins for pins, ok in zip(tried, agreed) if ok), [])
    return Cause(sources=list(found), tried=tried, agreed=agreed)


def set_sites(script: Path) -> list[str]:
    """Where the script iterates a `set` in an order that follows the hash seed (read, not run): a `set(...)` call,
    a set literal or comprehension iterated by a for, a comprehension, or list/tuple/enumerate/join/dict.fromkeys."""
    try:
        tree = ast.parse(Path(script).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return []
    name = Path(script).name
    return sorted({f"{name}:{node.lineno}" for node in _set_iterations(tree)}, key=lambda s: int(s.rsplit(":")[1]))


_ITERATING = {"list", "tuple", "enumerate", "iter", "fromkeys", "join", "zip", "map"}


def _is_set(node) -> bool:
    return isinstance(node, (ast.Set, ast.SetComp)) or (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("set", "frozenset"))


def _set_iterations(tree) -> list:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.comprehension)) and _is_set(node.iter):
            found.append(node.iter)
        elif isinstance(node, ast.Call):
            called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            if called in _ITERATING:
                found += [a for a in node.args if _is_set(a)]
    return found


def remedy(cause: Cause | None, created: dict[str, Made], sites: list[str]) -> str:
    """What to do, in one sentence with the line, for what the experiment found (or did not)."""
    where = next((m.site for m in created.values() if m.site), "")
    at = f" (the first variable that differs is made at {where})" if where else ""
    if cause is None or not cause.found:
        return KIND_REMEDIES["init"] + at if cause is None else (
            f"pinning {listed([BY_NAME[n].what for n in cause.tried[-1]])} together did not make two fresh processes "
            f"agree: the difference comes from elsewhere (the clock, os.urandom, the order of files on disk, a "
            f"thread's timing){at}")
    pieces = [_piece(name, sites) for name in cause.sources]
    keras = [n for n in cause.sources if n in SEEDED_BY_KERAS]
    if keras and (created or keras != ["tensorflow"]):  # a model's state: Keras' own seeding call
        pieces = [p for n, p in zip(cause.sources, pieces) if n not in SEEDED_BY_KERAS]
        why = "; ".join(BY_NAME[n].why for n in keras)
        pieces.insert(0, f"call `keras.utils.set_random_seed({SEED})` (tf_keras: `tf.keras.utils.set_random_seed("
                         f"{SEED})`) before the model is built{at}: {why}")
    return "; and ".join(pieces)


def _piece(name: str, sites: list[str]) -> str:
    source = BY_NAME[name]
    if name == "hash":
        where = f" (a `set` is iterated at {listed(sites)})" if sites else ""
        return (f"iterate in a fixed order, e.g. `sorted(...)`{where}, or set `PYTHONHASHSEED={SEED}` before Python "
                f"starts: {source.why}")
    if name == "tfdata":
        return f"make the input pipeline deterministic (`{source.line}` on its parallel stages): {source.why}"
    if name == "tensorflow":
        return (f"`{source.line.format(seed=SEED)}` before the input pipeline is built, or a `seed=` on its shuffle: "
                f"{source.why}")
    return f"`{source.line.format(seed=SEED)}` before the model is built: {source.why}"


def rows(fresh: FreshCheck, where: str, remedy_text: str) -> list[Source]:
    """The check's first-class sources: kind `init`, a variable at the training call; kind `input`, a batch."""
    out = [Source(rank=0, op_name=key, op_type="Variable", kind="init", first_step=0, region="", iteration=None,
                  seen_across="processes", runs_differing=1, runs=2, distinct_values=2, downstream_differing=0,
                  affects_result=True, max_abs_diff=None, max_ulp_diff=None, frac_elements_differing=None,
                  source_location=fresh.created.get(key, Made("")).site, known_remedy=remedy_text,
                  observer_effect=False, detail=fresh.created.get(key, Made("")).maker)
           for key in fresh.init]
    out += [Source(rank=0, op_name=f"batch of step {k}", op_type="input", kind="input", first_step=k, region="",
                   iteration=None, seen_across="processes", runs_differing=1, runs=2, distinct_values=2,
                   downstream_differing=0, affects_result=True, max_abs_diff=None, max_ulp_diff=None,
                   frac_elements_differing=None, source_location=where, known_remedy=remedy_text,
                   observer_effect=False, detail=f"the arguments of the training call at {where}" if where else "")
            for k in fresh.batches]
    return out


def evidence(fresh: FreshCheck) -> str:
    """The verdict's clause for a fresh-process difference ("" where the processes agree)."""
    if fresh.init:
        return (f"two fresh processes reach the training call with {len(fresh.init)} variable(s) of different "
                f"value ({listed(fresh.init)})")
    if fresh.batches:
        return f"two fresh processes feed the training call different batches (from step {fresh.batches[0]})"
    if fresh.first_differing_step:
        return (f"two fresh processes, from the same state and batches, differ after step "
                f"{fresh.first_differing_step}")
    if fresh.script_apart:
        t = fresh.script
        where = f" (in {t.apart_call})" if t.apart_call else ""
        ran = " and ".join(map(str, t.ran))
        return (f"two fresh runs of the script part after training step {t.first_apart}{where}"
                if t.first_apart is not None else f"two fresh runs of the script ran {ran} steps")
    return ""
