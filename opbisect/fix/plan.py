"""The fix's decisions, each made once here: what the next round applies (or why there is none), what to recommend,
and the lines a script needs to keep it. Pure: a round's record in, a plan or a stop out (fix/driver.py runs them).

A source hides the sources after it (its difference reaches them), so each round applies everything found so far:
every op that is an op's own variation patched (under the family switch of one with no rewrite), and where the
variation is a seed's (an unseeded random op; state or batches that differ between fresh processes, whose cause the
fresh-process check pinned), that seed or that environment.
"""

from __future__ import annotations

import dataclasses
import enum

from ..analysis.sources import patchable
from ..ir.randomness import SEED, SEEDED_BY_KERAS
from ..patches.registry import has_rewrite, switch_of
from ..record.fixing import AS_WRITTEN, SEEDED, Recommendation
from ..record.model import Record, Source
from ..record.verification import XLA_FLAGS, Variant, Verification, ranked
from ..words import listed

GLOBAL_ENV = "TF_DETERMINISTIC_OPS"  # enable_op_determinism, from the environment: what `opbisect run` can set
SEEDABLE = ("random", "init", "input")  # kinds a seed (or PYTHONHASHSEED, or tf.data's order) fixes


class Stop(enum.Enum):
    """Why the rounds ended."""

    REPRODUCIBLE = "the script is bitwise reproducible with everything found applied"
    NAMED_NOTHING = "the step varied but no op could be named"
    UNEXPLAINED = "two fresh processes differ and no pinned source of randomness explains it"
    NO_REMEDY = "its new sources have no patch, and their remedy is no seed opbisect can set"
    NOTHING_NEW = "it named no new source: the patches left them as they were"
    MAX_ROUNDS = "--max-rounds reached"


@dataclasses.dataclass(frozen=True)
class RoundPlan:
    """What one round applies: every op found so far patched, the family switches and other environment, the seed."""

    number: int
    ops: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()  # family switches, set to 1
    seed: str = ""
    env: tuple[tuple[str, str], ...] = ()  # PYTHONHASHSEED, TF_DETERMINISTIC_OPS (tf.data's order)

    def environment(self) -> dict[str, str]:
        return {**{name: "1" for name in self.switches}, **dict(self.env)}


@dataclasses.dataclass(frozen=True)
class Decision:
    plan: RoundPlan | None  # the next round (None: the rounds end)
    stop: Stop | None
    why: str  # the stop, in words with what was seen
    patched: tuple[Source, ...] = ()  # the sources the next round patches first (patch.csv's rows of this round)


def seeding(record: Record, plan: RoundPlan) -> tuple[str, dict[str, str]]:
    """The seed and environment the round's seedable sources ask for, on top of the plan's."""
    seed, env = plan.seed, dict(plan.env)
    kinds = {s.kind for s in record.sources}
    cause = record.fresh.cause.sources if record.fresh and record.fresh.cause else []
    if "random" in kinds or ({"input"} & kinds and not cause) or set(cause) & set(SEEDED_BY_KERAS):
        seed = str(SEED)
    if "hash" in cause:
        env["PYTHONHASHSEED"] = str(SEED)
    if "tfdata" in cause:
        env[GLOBAL_ENV] = "1"  # the one switch that puts every tf.data stage in order (the script's edit is cheaper)
    return seed, env


def decide(plan: RoundPlan, record: Record, max_rounds: int) -> Decision:
    """After round `plan.number`'s record: the next round, or why there is none (each stop reason decided here)."""
    if not record.facts.verdict.nondeterministic:
        return Decision(None, Stop.REPRODUCIBLE, Stop.REPRODUCIBLE.value)
    if not record.sources:
        runs = f", also in {record.meta.runs} runs" if record.meta.looked_harder else ""
        fresh = record.fresh
        where = (f"; two fresh processes differ after step {fresh.first_differing_step} from the same state and "
                 f"batches: `opbisect trace --processes 2` names the op that chooses differently per process"
                 if fresh and fresh.first_differing_step else "; see the round's report (its observer effect)")
        if record.meta.jit_compile and record.meta.device.startswith("GPU"):
            where += ("; XLA compiles this step, and a kernel XLA picks can vary where capture's taps change its "
                      "picks: verify tries the patch under XLA's switches")
        return Decision(None, Stop.NAMED_NOTHING, f"{Stop.NAMED_NOTHING.value}{runs}{where}")
    if record.fresh and record.fresh.cause and not record.fresh.cause.found:
        return Decision(None, Stop.UNEXPLAINED, f"{Stop.UNEXPLAINED.value}: {listed(record.fresh.init)}")
    new = [s for s in record.sources if patchable(s) and s.op_name not in plan.ops]
    seed, env = seeding(record, plan)
    applies = bool(new) or seed != plan.seed or env != dict(plan.env)
    if not applies:
        # a kind no patch fixes, or an op this round was to patch and could not (no patch for it is registered
        # where the script runs: a numpy_function's own Python): each with its own remedy
        others = [s for s in record.sources if not patchable(s) or s.op_name not in record.meta.patched]
        if others:
            said = "; ".join(f"{s.op_name} (kind {s.kind}: {s.known_remedy})" for s in others[:3])
            return Decision(None, Stop.NO_REMEDY, f"{Stop.NO_REMEDY.value}: {said}")
        named = listed([s.op_name for s in record.sources])
        return Decision(None, Stop.NOTHING_NEW, f"{Stop.NOTHING_NEW.value} ({named})")
    if plan.number >= max_rounds:
        return Decision(None, Stop.MAX_ROUNDS, f"{Stop.MAX_ROUNDS.value} ({max_rounds})")
    following = RoundPlan(plan.number + 1, plan.ops + tuple(s.op_name for s in new), family_switches(plan, new),
                          seed, tuple(sorted(env.items())))
    return Decision(following, None, "", tuple(new))


def family_switches(plan: RoundPlan, new: list[Source]) -> tuple[str, ...]:
    """The plan's family switches and those the new sources with no rewrite need (cuDNN's MaxPoolGrad)."""
    needed = {switch_of(s.op_type) for s in new if switch_of(s.op_type) and not has_rewrite(s.op_type)}
    return tuple(sorted(set(plan.switches) | needed))


def recommendations(plan: RoundPlan, verification: Verification | None, patch_csv: str,
                    stop: Stop) -> list[Recommendation]:
    """What to recommend once the rounds ended, in the order the user's test tries them (at most TRIES): verify's
    bitwise reproducible variants where ops were patched, cheapest first (`ranked`), each with the plan's seed and
    environment. One process's runs cannot show a choice made once per process (XLA's autotuned kernels), so a
    variant two fresh runs refute gives way to the next. The seed and environment alone where nothing needed
    patching and the last round was reproducible; none where it was not (the user's test would only find what the
    rounds found)."""
    env = dict(plan.env)
    if not plan.ops and stop is not Stop.REPRODUCIBLE:
        return []
    if not plan.ops:
        return [Recommendation(variant=SEEDED if plan.seed or env else AS_WRITTEN, seed=plan.seed, env=env)]
    chosen = ranked(verification.variants) if verification else []
    return [_applying(v, plan, patch_csv) for v in chosen[:TRIES]]


TRIES = 3  # variants the user's test tries at most: each try is two more fresh runs of the script


def _applying(chosen: Variant, plan: RoundPlan, patch_csv: str) -> Recommendation:
    """verify's variant `chosen` as a configuration: its patch, family switches and environment, the plan's seed."""
    env = dict(plan.env)
    env.update({name: "1" for name in chosen.switches})
    env.update(chosen.env)  # XLA's own switch (XLA_FLAGS)
    if chosen.global_switch:
        env[GLOBAL_ENV] = "1"
    return Recommendation(variant=chosen.name, patch=patch_csv if chosen.patched else "", seed=plan.seed, env=env,
                          ratio=chosen.ratio, unlike_plain=bool(chosen.unlike_plain))


def keep_lines(rec: Recommendation, form: str) -> list[str]:
    """What a training script needs to keep the recommendation without `opbisect run`."""
    lines = []
    for name, value in sorted(rec.env.items()):
        if name == "PYTHONHASHSEED":
            lines.append(f"# PYTHONHASHSEED={value} in the environment: Python reads it when it starts (or iterate "
                         f"the set in sorted order)")
        elif name == GLOBAL_ENV:
            lines.append("tf.config.experimental.enable_op_determinism()  # before the model is built")
        elif name == XLA_FLAGS:  # added to the user's own XLA flags, not in their place
            lines.append(f'os.environ["{name}"] = os.environ.get("{name}", "") + " {value}"  # before XLA '
                         f'first compiles')
        else:
            lines.append(f'os.environ["{name}"] = "{value}"  # before TensorFlow is imported')
    if rec.seed:
        lines.append(f"keras.utils.set_random_seed({rec.seed})  # first, before the model is built "
                     f"(tf_keras: tf.keras.utils.set_random_seed)")
    if rec.patch:
        name = "model" if form in ("keras", "fit") else "step"
        when = f"before training call {rec.at}, which the patch was made for" if rec.at else "before training"
        lines += ["import opbisect",
                  f'{name} = opbisect.deterministic({name}, "{rec.patch}")  # after {name} is built, {when}']
    return lines
