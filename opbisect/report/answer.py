"""The answer first: what differs, why, what to do (with the line), and the next command to copy, read off the record
for the top of the terminal summary and of the page. It decides nothing: each part is a fact the record holds (the
verdict, the fresh-process check and its cause, the ranked sources and their remedies).

Sources that share one kind, one op type and one remedy are one finding (`groups`): 11 variables an unseeded
initializer made, or 14 BiasAddGrads, are a count and a list, not eleven rows that repeat the same remedy.
"""

from __future__ import annotations

import dataclasses
import shlex

from ..analysis.sources import patchable, replaceable
from ..record.model import Record, Source
from ..words import listed, ruled_out


@dataclasses.dataclass
class Answer:
    verdict: str  # "NONDETERMINISTIC" or "deterministic"
    exit_code: int
    what: str  # what differs (or that nothing did), one sentence
    do: str  # what to do, with the line where it goes ("" where nothing is to do)
    next: str  # the command to copy next ("" where none)


@dataclasses.dataclass
class Group:
    """Sources with one kind, one op type and one remedy: one finding."""

    sources: list[Source]

    @property
    def first(self) -> Source:
        return self.sources[0]

    @property
    def names(self) -> list[str]:
        return [s.op_name for s in self.sources]


def groups(record: Record) -> list[Group]:
    found: dict[tuple, Group] = {}
    for s in record.sources:  # ranked: a group is where its best-ranked source is
        key = (s.kind, s.op_type, s.known_remedy, s.seen_across, s.observer_effect)
        found.setdefault(key, Group([])).sources.append(s)
    return list(found.values())


def command(record: Record, *words: str) -> str:
    """`opbisect WORDS SCRIPT [-- ARGS]` for this record's script, at the training call it analysed (`--at`) unless
    the words name another."""
    args, at = record.meta.script_args, record.meta.intercepted.get("at", "")
    here = ["--at", at] if at and "--at" not in words else []
    return shlex.join(["opbisect", *words[:1], record.meta.script, *words[1:], *here,
                       *(["--", *args] if args else [])])


def answer(record: Record) -> Answer:
    v = record.facts.verdict
    verdict = "NONDETERMINISTIC" if v.nondeterministic else "deterministic"
    if not v.nondeterministic:
        return Answer(verdict, v.exit_code, _clean(record), "", "")
    fresh = record.fresh
    if fresh is not None and (fresh.init or fresh.batches):
        group = next(g for g in groups(record) if g.first.seen_across == "processes")
        return Answer(verdict, v.exit_code, _apart(record), group.first.known_remedy, command(record, "fix"))
    if record.sources:
        # fix applies patches, switches and seeds; an op none replaces (a numpy_function's Python) is the user's edit
        fixable = any(replaceable(s) or not patchable(s) for s in record.sources)
        return Answer(verdict, v.exit_code, _varies(record), _remedy(record),
                      command(record, "fix") if fixable else "")
    if fresh is not None and fresh.first_differing_step:
        return Answer(verdict, v.exit_code, f"Your two runs start alike but differ after step "
                      f"{fresh.first_differing_step}: an op gives other results in another process (cuDNN "
                      f"autotuning, a graph built in hash order).", "",
                      command(record, "trace", "--processes", "2"))
    if fresh is not None and fresh.script_apart:
        return _script_apart(record, verdict, v.exit_code)
    looked = record.meta.looked_harder
    return Answer(verdict, v.exit_code, f"The step varies ({'; '.join(v.evidence)}), but no op could be named.", "",
                  "" if looked else command(record, "trace", "--max-runs", str(4 * record.meta.runs)))


def _script_apart(record: Record, verdict: str, code: int) -> Answer:
    """The step analysed gives one result, but two more fresh runs of the script part: in a later training call (a
    second fit, a phase compiled again), the next trace is of that call; in the one analysed, at a later step or
    more rarely than these runs could see, a longer trace."""
    t = record.fresh.script
    analysed = t.calls[0] if t.calls else "the training call"
    what = f"Your two runs start alike, and {record.runs} runs of {analysed} give one result, but two fresh runs of " \
           f"the script part after training step {t.first_apart}"
    if t.parts_elsewhere():
        return Answer(verdict, code, f"{what}, in {t.apart_call}: a training call this trace did not analyse.",
                      "", command(record, "trace", "--at", t.apart_call))
    steps = max(t.first_apart or 1, record.meta.steps)
    return Answer(verdict, code, f"{what}: the step varies past step {record.meta.steps} or more rarely than "
                  f"{record.runs} runs show.", "",
                  command(record, "trace", "--steps", str(steps), "--runs", str(4 * record.runs)))


def _clean(record: Record) -> str:
    v = record.facts.verdict
    fresh = record.fresh
    both = "Two fresh runs of your script start the training call alike, and " if fresh and not fresh.error else ""
    bound = f" ({ruled_out(v.rate_bound)})" if v.rate_bound is not None else ""
    script = fresh.script if fresh else None
    past = ""
    if script and script.agreed:
        calls = f" ({', '.join(script.calls)})" if len(script.calls) > 1 else ""
        end = ", to its end" if script.to_the_end else ""
        past = (f" Two more fresh runs of the script agree through {script.ran[0]} training step(s){calls}{end} "
                f"({ruled_out(script.rate_bound, 'steps')}).")
    return f"{both}{record.runs} runs of the step from one state give one result{bound}.{past}"


def _apart(record: Record) -> str:
    fresh = record.fresh
    if fresh.init:
        return (f"Your two runs differ before training starts: {len(fresh.init)} variable(s) get other values in "
                f"every fresh process ({listed(fresh.init, 3)}).")
    return f"Your two runs train on different batches from step {fresh.batches[0]}."


def _varies(record: Record) -> str:
    top, more = record.sources[0], len(record.sources) - 1
    also = f", and {more} more source(s)" if more else ""
    if top.kind == "random":
        return f"An unseeded random op draws anew in every run: {top.op_name} ({top.op_type}){also}."
    return (f"The training step gives other results from the same state: {top.op_name} ({top.op_type}) varies on "
            f"identical inputs{also}.")


def _remedy(record: Record) -> str:
    ops = [s for s in record.sources if replaceable(s)]
    if ops:
        return ("`opbisect fix` replaces only these ops with deterministic ones and checks that two fresh runs "
                "agree; `tf.config.experimental.enable_op_determinism()` fixes them too, at its cost")
    return record.sources[0].known_remedy
