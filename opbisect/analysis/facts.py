"""Decisions, each made once here and stored in the record with its reason; views only read them.

- The grappler choice: which configuration the instrumented step runs under (made during the run, from the
  two plain passes).
- The verdict, and so the exit code: it follows the uninstrumented step alone (under the user's own grappler
  configuration, model.fit itself in the fit form, and across processes with --processes). A difference seen
  only in the instrumented step is an observer effect, not a finding about the user's step.
- The observer effect: what capture did to the step.
- The fit replay check: whether opbisect's replay of fit's batches leaves the weights model.fit leaves.

A race fires in some runs only, so a claim that two passes behave differently ("capture hid it", "a grappler
rewrite is involved") is made only when the counts support it: Fisher's exact test on how many runs of each pass
differed, at 5%. Otherwise the record says what was seen and that it is inconclusive (--max-runs looks harder).
"""

from __future__ import annotations

import dataclasses
import math

from ..errors import EXIT_CLEAN, EXIT_FOUND
from ..record.model import (
    CrossProcess,
    Facts,
    FitReplay,
    GrapplerChoice,
    InstrumentedRuns,
    ObserverEffect,
    ReplicaDivergence,
    Runs,
    Trajectory,
    Verdict,
    rate_bound,
)
from .compare import runs_off_mode

SIGNIFICANCE = 0.05


def fired(runs: Runs) -> int:
    """How many runs differ from the most common result (0: all agree)."""
    return runs_off_mode(runs.results())


def chance(k1: int, n1: int, k2: int, n2: int) -> float:
    """Fisher's exact test, two-sided: the probability of counts at least this uneven between two passes with one
    firing rate (k of n runs differed in each)."""
    k, n = k1 + k2, n1 + n2

    def p(x: int) -> float:
        return math.comb(k, x) * math.comb(n - k, n1 - x) / math.comb(n, n1)

    seen = p(k1)
    return min(1.0, sum(p(x) for x in range(max(0, k - n2), min(k, n1) + 1) if p(x) <= seen * (1 + 1e-9)))


def _seen(label_a: str, k1: int, n1: int, label_b: str, k2: int, n2: int) -> str:
    return f"the difference showed in {k1} of {n1} {label_a} runs and {k2} of {n2} {label_b} runs"


PINNED_PASSES = ("constant folding, arithmetic optimization, the memory and dependency optimizers and grappler's "
                 "second round")  # settings.PINNED_GRAPPLER


def grappler_choice(default: Trajectory, pinned: Trajectory | None, xla: bool = False) -> GrapplerChoice:
    if xla:  # checked: TF_CPP_VMODULE=meta_optimizer=1 logs grappler's passes for a tf.function, none with XLA
        return GrapplerChoice("default", "XLA compiles the step (jit_compile): grappler does not rewrite it, so the "
                                         "taps cannot move grappler's decisions and there is nothing to pin")
    if pinned is None:
        return GrapplerChoice("default", "--no-pin-grappler: the instrumented step runs under your grappler config")
    default_varies, pinned_varies = not _deterministic(default), not _deterministic(pinned)
    if default_varies == pinned_varies:
        return GrapplerChoice("pinned", f"{PINNED_PASSES} are pinned off for the plain and the instrumented step, so "
                                        "the taps cannot move their decisions")
    k1, k2 = fired(default.final()), fired(pinned.final())
    if chance(k1, default.runs, k2, pinned.runs) >= SIGNIFICANCE:
        return GrapplerChoice("default", f"{_seen('default', k1, default.runs, 'pinned', k2, pinned.runs)}: too few "
                                         f"to tell whether a grappler rewrite is involved (inconclusive; --max-runs "
                                         f"looks harder); the analysis runs under your config, as the verdict does",
                              inconclusive=True)
    if default_varies:
        return GrapplerChoice("default", f"pinning grappler's {PINNED_PASSES} hides the nondeterminism: a grappler "
                                         "rewrite is involved; the analysis runs under your config")
    return GrapplerChoice("default", f"pinning grappler's {PINNED_PASSES} makes a step vary that does not vary under "
                                     "your config; the analysis runs under your config, as the verdict does")


def pinning_not_needed() -> GrapplerChoice:
    """The analysis ran under pinned grappler, and the instrumented step gave the uninstrumented step's bits in
    every run: the pinned plain pass, which would be its baseline, was not needed."""
    return GrapplerChoice("pinned", f"{PINNED_PASSES} are pinned off for the instrumented step; it gave the "
                                    f"uninstrumented step's result in every run, so neither pinning nor the taps "
                                    f"changed the step, and the pinned plain pass was not run")


def unsettled(default: Trajectory, fit: Trajectory | None, choice: GrapplerChoice, observer: ObserverEffect,
              named: bool = True) -> str:
    """What the runs so far leave open ("" when nothing): a deterministic verdict (more identical runs bound a
    rarer race), a claim the counts cannot support, or a step that varied while no op was named (`named`: the
    analysis named a source; a race that fired in the plain runs and not in capture's may fire there in more)."""
    if observer.effect == "inconclusive":
        return "the observer effect was inconclusive"
    if choice.inconclusive:
        return "grappler's part was inconclusive"
    deterministic = _deterministic(default) and (fit is None or _deterministic(fit))
    if deterministic:
        return "the step gave one result"
    if not named:
        return "the step varied but no op was named"
    return ""


def _deterministic(t: Trajectory) -> bool:
    return t.first_differing_step() is None


def verdict(default: Trajectory, fit: Trajectory | None, processes: CrossProcess | None) -> Verdict:
    evidence = []
    first = default.first_differing_step()
    if first is not None:
        runs = default.at(first)
        where = f" after step {first}" if default.steps > 1 else ""
        evidence.append(f"the uninstrumented step under your grappler config gave {runs.distinct()} distinct "
                        f"results in {len(runs.outputs)} runs{where}")
    batches = default.differing_batches()
    if batches:
        evidence.append(f"the batch of step {batches[0]} differs between runs")
    if fit is not None and fit.first_differing_step() is not None:
        evidence.append(f"model.fit itself differs between runs from step "
                        f"{fit.step_number(fit.first_differing_step())}")
    if processes is not None and processes.differs:
        evidence.append(f"across {processes.processes} processes the results differ from step "
                        f"{processes.first_differing_step}")
    found = bool(evidence)
    bound = None if found else rate_bound(default.runs)
    return Verdict(nondeterministic=found, exit_code=EXIT_FOUND if found else EXIT_CLEAN, evidence=evidence,
                   rate_bound=bound)


def with_fresh_processes(verdict: Verdict, clause: str) -> Verdict:
    """The verdict once the fresh-process check has run: `clause` says what differed between two fresh processes
    of the script ("" where they agree, and the verdict stands). A difference there is what the user's own test
    sees, so it is nondeterminism however many runs inside this process agreed."""
    if not clause:
        return verdict
    return Verdict(nondeterministic=True, exit_code=EXIT_FOUND, evidence=[*verdict.evidence, clause],
                   rate_bound=None)


@dataclasses.dataclass
class Observed:
    """What the experiment's passes saw (execute/experiment.py): everything its decisions are made from."""

    runs: int  # the runs of each pass (--max-runs where it looked harder)
    default: Trajectory  # the uninstrumented step, the user's grappler config
    fit: Trajectory | None  # model.fit itself (the fit form)
    pinned: Trajectory | None  # the uninstrumented step, grappler pinned (None where it was not needed)
    choice: GrapplerChoice
    instrumented: InstrumentedRuns  # step 1 with its tensors fingerprinted
    first: Verdict  # the verdict of the first runs, before looking harder

    @property
    def baseline(self) -> Trajectory:
        """The plain pass the analysis is compared with: the pinned one where the analysis ran pinned."""
        return self.pinned if self.pinned is not None and self.choice.config == "pinned" else self.default


def decide(seen: Observed, left_out: list[str], mirrored: list[list[str]]) -> Facts:
    """Every decision of the experiment, once: the verdict (the first runs' where looking harder missed what they
    had seen), the grappler choice, the observer effect, the fit replay check (`left_out`: the metric variables and
    the restarted random ops' state) and the replicas' divergence (`mirrored`: each mirrored variable's copies)."""
    found = verdict(seen.default, seen.fit, None)
    if seen.first.nondeterministic and not found.nondeterministic:
        found = kept_from_first_runs(seen.first, seen.runs)
    return Facts(verdict=found, grappler=seen.choice, observer=observer_effect(seen.baseline.at(1), seen.instrumented),
                 fit_replay=fit_replay(seen.fit, seen.default, left_out) if seen.fit else None,
                 replica_divergence=replica_divergence(seen.default, mirrored))


def kept_from_first_runs(first: Verdict, runs: int) -> Verdict:
    """The verdict where looking harder (--max-runs) gave one result in `runs` runs but the first runs had differed:
    differing results are proof, a larger sample that misses a rare race is not, so the first runs' verdict stands."""
    return dataclasses.replace(first, evidence=[f"{e} (in the first runs; looking harder, {runs} runs gave one result)"
                                                for e in first.evidence])


def observer_effect(plain: Runs, instrumented: InstrumentedRuns) -> ObserverEffect:
    """Compare the plain and the instrumented step 1 under one grappler configuration."""
    inst = instrumented.as_runs()
    plain_varies, inst_varies = not plain.deterministic(), not inst.deterministic()
    counts = dict(plain_fired=fired(plain), plain_runs=len(plain.after), instrumented_fired=fired(inst),
                  instrumented_runs=len(inst.after))
    if not plain_varies and not inst_varies:
        same = plain.after[0] == inst.after[0] and plain.outputs[0] == inst.outputs[0]
        effect = "none" if same else "changed_result"
    elif plain_varies and not inst_varies:
        effect = "hid"
    elif inst_varies and not plain_varies:
        effect = "created"
    else:
        effect = "same_variables" if set(plain.varying_variables()) == set(inst.varying_variables()) else "moved"
    by_chance = chance(counts["plain_fired"], counts["plain_runs"], counts["instrumented_fired"],
                       counts["instrumented_runs"])
    if effect in ("hid", "created") and by_chance >= SIGNIFICANCE:
        effect = "inconclusive"  # one pass fired, the other not, but so few runs could show that by chance
    return ObserverEffect(effect=effect, plain_varies=plain_varies, instrumented_varies=inst_varies, **counts)


def fit_replay(fit: Trajectory, replay: Trajectory, left_out: list[str]) -> FitReplay:
    """Compare model.fit's weights with the replay's, step by step, while both are deterministic (after that,
    run 1 of each is one draw among many). `left_out`: the metric variables (fit resets them every epoch) and the
    restarted random ops' state variables (only the replay draws from them; fit's own kernels hold its place)."""
    metrics = set(left_out)
    fit_ok = (fit.first_differing_step() or fit.steps + 1) - 1  # entries of fit's, then steps of the replay's
    replay_ok = (replay.first_differing_step() or replay.steps + 1) - 1
    entries = [j for j in range(1, fit_ok + 1) if fit.step_number(j) <= min(replay.steps, replay_ok)]

    def weights(t: Trajectory, k: int) -> dict:
        return {v: f for v, f in t.after[0][k - 1].items() if v not in metrics}

    mismatch = next((fit.step_number(j) for j in entries if weights(fit, j) != weights(replay, fit.step_number(j))),
                    None)
    return FitReplay(checked_steps=fit.step_number(entries[-1]) if entries else 0, mismatch_step=mismatch)


def replica_divergence(runs: Trajectory, mirrored: list[list[str]]) -> ReplicaDivergence | None:
    """The first step after which some mirrored variable's copies disagree between replicas, in any run."""
    for step in range(1, runs.steps + 1):
        after = runs.at(step).after
        apart = [[g[0] for g in mirrored if len({run[k] for k in g}) > 1] for run in after]
        if any(apart):
            diverged = sorted({key for keys in apart for key in keys})
            return ReplicaDivergence(step=step, variables=diverged, runs=sum(1 for keys in apart if keys))
    return None


def body_findings(analyses: list, regions: dict[str, dict]) -> list:
    """A loop whose trip count, or a branch op whose taken branch, differs between runs (first step where it does).
    The cause lies upstream of the loop's condition or the branch's predicate; the sources say where."""
    from ..ir.ids import TensorRef
    from ..record.model import Finding

    found, seen = [], set()
    for a in analyses:
        kept: dict[str, int] = {}  # executions fingerprinted per body (fewer than ran: a fixed-size XLA matrix)
        for tap in a.instrumented.taps:
            ref = TensorRef.parse(tap)
            if ref.iteration is not None:
                kept[ref.region] = max(kept.get(ref.region, 0), ref.iteration + 1)
        for region, counts in a.instrumented.executions.items():
            if region in kept and max(counts) > kept[region] and ("kept", region) not in seen:
                seen.add(("kept", region))
                found.append(Finding("note", f"{region} ran {max(counts)} times in step {a.step}; under XLA its first "
                                             f"{kept[region]} executions are fingerprinted (a fixed size)"))
            if region in seen or len(set(counts)) < 2:
                continue
            seen.add(region)
            runs = ", ".join(str(c) for c in counts)  # (a fixed-size XLA matrix counts past its capacity too)
            what = "the loop's trip count" if regions[region]["kind"] == "loop" else "which branch runs"
            found.append(Finding("warning", f"{region} ran {runs} times in the runs of step {a.step}: {what} "
                                            f"differs between runs"))
    return found
