"""The replica ladder's decision: does the difference live inside one replica, or does it need several?

Made once from the rungs' own verdicts (each the uninstrumented step's, in its own process) and stored in the
record's `Ladder`. A rung that stayed identical proves only as much as its runs can: the reason carries its bound
(a difference firing in more than that share of runs would have shown, 95% confidence).
"""

from __future__ import annotations

from ..record.model import Ladder, Record, Rung
from ..words import ruled_out


def rung(limit: int, env: dict, label: str, record: Record) -> Rung:
    verdict = record.facts.verdict
    return Rung(label=label, limit=limit, env=dict(env), replicas=record.meta.replicas,
                nondeterministic=verdict.nondeterministic, distinct=record.default.final().distinct(),
                runs=record.default.runs, rate_bound=verdict.rate_bound,
                sources=[_source(s) for s in record.sources])


def _source(s) -> str:
    replica = f", replica {s.replica}" if s.replica is not None else ""
    return f"{s.op_name} ({s.op_type}, {s.kind}{replica})"


def decide(rungs: list[Rung], analysed: str) -> Ladder:
    """The conclusion from the rungs without NCCL settings; the NCCL rungs' verdict beside it. `analysed`: the
    rung whose record carries the ladder."""
    plain = [r for r in rungs if not r.env]
    fewest, most = min(plain, key=lambda r: r.replicas), max(plain, key=lambda r: r.replicas)
    conclusion, reason = _conclusion(fewest, most)
    return Ladder(rungs=rungs, conclusion=conclusion, reason=reason, nccl=_nccl(most, [r for r in rungs if r.env]),
                  analysed=analysed)


def _conclusion(fewest: Rung, most: Rung) -> tuple[str, str]:
    if fewest.replicas == most.replicas:
        return "unchanged", (f"every rung ran {most.replicas} replica(s): the step's replicas do not come from a "
                             f"MirroredStrategy that --replicas can limit")
    if fewest.nondeterministic:
        return "in_replica", (f"the step varies with {fewest.replicas} replica(s) ({fewest.distinct} distinct results "
                              f"in {fewest.runs} runs): an op inside a replica, not the replicas' interplay"
                              + _named(fewest))
    if most.nondeterministic:
        return "needs_replicas", (f"identical in {fewest.runs} runs with {fewest.replicas} replica(s){_bound(fewest)}, "
                                  f"{most.distinct} distinct results in {most.runs} runs with {most.replicas}: the "
                                  f"difference needs several replicas (a collective, or ops that run only in some "
                                  f"replicas)" + _named(most))
    weakest = max((fewest, most), key=lambda r: r.rate_bound or 0.0)
    return "deterministic", f"identical at every rung{_bound(weakest)}"


def _nccl(full: Rung, nccl: list[Rung]) -> str:
    if not nccl:
        return ""
    if not full.nondeterministic:
        return "the NCCL settings ran, but the step is already identical with its default NCCL settings"
    steady = [r for r in nccl if not r.nondeterministic]
    if steady:
        return (f"the difference follows NCCL: identical under {', '.join(_env(r) for r in steady)}"
                f"{_bound(steady[0])}: the all-reduce's algorithm changes its summation order")
    return "the difference does not follow NCCL: the step still varies under " + ", ".join(_env(r) for r in nccl)


def _env(r: Rung) -> str:
    return " ".join(f"{k}={v}" for k, v in r.env.items())


def _bound(r: Rung) -> str:
    if r.rate_bound is None:
        return ""
    return f" ({ruled_out(r.rate_bound)}; --max-runs looks harder)"


def _named(r: Rung) -> str:
    if not r.sources:
        return ""
    shown = "; ".join(r.sources[:3]) + (f"; and {len(r.sources) - 3} more" if len(r.sources) > 3 else "")
    return f". Sources there: {shown}"
