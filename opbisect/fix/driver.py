"""The fix's search, run: a driver in the shape of torch.fx's net_min_base minimizer (the settings once, one plan per
round, a report per round, the stop decided in one function, fix/plan.py), ending on the user's own test.

    FixDriver(settings, staging, final, say).run() -> (Fix, Verification | None)
      trace_round(plan)    `opbisect trace SCRIPT --patch <patch.csv> --seed S` in a fresh process under the plan's
                           environment (family switches, PYTHONHASHSEED); its record read back
      plan.decide          the next round, or why the rounds end
      verify()             `opbisect verify --patch <patch.csv>` in a fresh process, where ops were patched; its
                           line as each variant finishes said as it comes
      tried_in_turn(recs)  user_test(rec) on verify's reproducible variants, cheapest first, until one agrees:
                           two fresh `opbisect run` of the script with it applied, side by side, through
                           --check-steps steps, compared step by step

Every child keeps the protocol of execute/children.py; each writes its record into the fix's staged folder.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import pandas as pd

from ..execute import children
from ..execute.usertest import UserTestRuns
from ..patches.selection import FIX_CSV_NAME
from ..record import store
from ..record.fixing import Fix, Recommendation, Refuted, Round, UserTest
from ..record.model import CSV_COLUMNS, Record
from ..record.verification import Verification
from ..report.fix_view import round_line
from ..report.verify_view import PROGRESS as VERIFY_SAYS
from ..settings import FixSettings, TraceSettings, VerifySettings, shared
from . import plan as decide


class FixDriver:
    def __init__(self, settings: FixSettings, staging: Path, final: Path, say=lambda line: None):
        self.settings, self.staging, self.final, self.say = settings, staging, final, say
        self.rows: list[dict] = []  # patch.csv: every op patched, with the round that found it
        self.rounds: list[Round] = []
        self.form = "step"
        self.intercepted = False  # a script that trains (zero edits), or the target contract
        self.causes: list[str] = []  # the fresh-process check's remedies, as comments for the script
        self.kept: dict[int, Round] = {}  # rounds a stopped fix finished, by number (fix/resume.py)
        self.kept_verify = False  # its verify finished, and its report is in the staged folder
        self.verified = False  # verify's report is in the staged folder
        self.checked_on: dict[str, str] = {}  # the TensorFlow and device the rounds ran on (the first's record)
        self.checkpoint = lambda: None  # where a round or verify finished: fix/resume.py notes it for a killed fix

    @property
    def patch_csv(self) -> Path:
        return self.staging / FIX_CSV_NAME

    # -- the rounds ----------------------------------------------------------------------------------------------
    def run(self) -> tuple[Fix, Verification | None]:
        plan, decision = decide.RoundPlan(1), None
        while True:
            record = self.trace_round(plan)
            decision = decide.decide(plan, record, self.settings.max_rounds)
            if decision.plan is None:
                break
            self._patch(decision)
            plan = decision.plan
        verification = self.verify() if plan.ops else None
        recs = decide.recommendations(plan, verification, str(self.final / FIX_CSV_NAME), decision.stop)
        # a patch was made for that call: run takes it so
        recs = [dataclasses.replace(r, at=self.settings.at) if r.patch else r for r in recs]
        rec, test, refuted = self.tried_in_turn(recs)
        fix = Fix(script=str(self.settings.script), script_path=str(self.settings.script.resolve()), form=self.form,
                  rounds=self.rounds, stopped=decision.stop.name, why=decision.why, switches=list(plan.switches),
                  verify=f"verify/{self.settings.script.stem}-verify" if verification else "",
                  recommendation=rec, lines=self.causes + decide.keep_lines(rec, self.form) if rec else [],
                  script_args=list(self.settings.script_args), out=str(self.settings.out), test=test,
                  refuted=refuted, checked_on=self.checked_on)
        return fix, verification

    def tried_in_turn(self, recs: list[Recommendation]) -> tuple[Recommendation | None, UserTest | None, list]:
        """The user's test on each recommendation in turn until two fresh runs agree: (the one it ends on, its test,
        those refuted before it). Where every one is refuted, it ends on the last. Where the runs part in a training
        call this fix did not analyse, it ends there: the fix of that call is the next step, not a wider switch."""
        refuted = []
        for k, rec in enumerate(recs):
            test = self.user_test(rec)
            if test.agreed or test.parts_elsewhere() or k == len(recs) - 1:
                return rec, test, refuted
            self.say(f"  two fresh runs with {rec.variant} differ: the next, {recs[k + 1].variant}")
            refuted.append(Refuted(rec, test))
        return None, None, refuted

    def round_settings(self, plan: decide.RoundPlan) -> TraceSettings:
        """The round's trace: the fix's own options, each round's by `shared`, and what the plan applies."""
        return shared(self.settings, TraceSettings, out=self.staging / f"round{plan.number}",
                      max_runs=self.settings.round_max_runs(), progress=False, html=False, seed=plan.seed,
                      patch=str(self.patch_csv) if plan.ops else "", script_check=False)  # the fix ends on its own

    def trace_round(self, plan: decide.RoundPlan) -> Record:
        """The round's trace in a fresh process, or the same round a stopped fix finished (its report kept)."""
        began = time.time()
        settings = self.round_settings(plan)
        kept = self.kept.get(plan.number)
        code = kept.exit_code if kept else self._traced(plan, settings)
        record = store.load(settings.out / settings.script.stem)
        if plan.number == 1:
            self.form, self.intercepted = record.meta.form, bool(record.meta.intercepted)
            self.checked_on = {"tensorflow": record.meta.tf_version, "device": record.meta.device}
        named = {op for r in self.rounds for op in r.sources}
        cause = record.fresh.cause.sources if record.fresh and record.fresh.cause else []
        self.rounds.append(Round(
            number=plan.number, exit_code=code, switches=[f"{k}={v}" for k, v in sorted(plan.environment().items())],
            patched=list(record.meta.patched), sources=[s.op_name for s in record.sources],
            new=[s.op_name for s in record.sources if s.op_name not in named],
            seconds=kept.seconds if kept else round(time.time() - began, 1),
            report=f"round{plan.number}/{settings.script.stem}", runs=record.meta.runs, seed=plan.seed,
            looked_harder=record.meta.looked_harder, cause=list(cause), kept=bool(kept)))
        self.checkpoint()
        self.say(round_line(self.rounds[-1]))
        for s in record.sources:  # one cause, one remedy: once however many variables or batches share it
            said = f"# what differed between fresh processes ({s.kind}), by experiment: {s.known_remedy}"
            if s.seen_across == "processes" and s.kind in ("init", "input") and said not in self.causes:
                self.causes.append(said)
        return record

    def _traced(self, plan: decide.RoundPlan, settings: TraceSettings) -> int:
        env = {**os.environ, **plan.environment()}
        done = children.run(children.command_line("trace", settings.to_argv()), env)
        return children.verdict(done, f"round {plan.number}")

    def _patch(self, decision: decide.Decision) -> None:
        """patch.csv with the round's new ops: what the next round, verify and `opbisect run` take."""
        for s in decision.patched:
            self.rows.append({"round": decision.plan.number - 1,
                              **{k: v for k, v in dataclasses.asdict(s).items() if k in CSV_COLUMNS}})
        if self.rows:  # a fix that patches nothing writes no patch (`opbisect run --patch` refuses an empty one)
            pd.DataFrame(self.rows, columns=["round", *CSV_COLUMNS]).to_csv(self.patch_csv, index=False)

    # -- verify ----------------------------------------------------------------------------------------------------
    def verify_settings(self) -> VerifySettings:
        s = self.settings
        return shared(s, VerifySettings, patch=str(self.patch_csv), runs=s.verify_runs, out=self.staging / "verify")

    def verify(self) -> Verification:
        settings = self.verify_settings()
        if self.kept_verify:
            self.say(f"verify: --patch {FIX_CSV_NAME} ({len(self.rows)} op(s)): kept from the stopped fix")
        else:
            self.say(f"verify: --patch {FIX_CSV_NAME} ({len(self.rows)} op(s)) against the plain step and the "
                     "switches, in a fresh process")  # its own lines follow: what runs, then each variant as it ends
            done = children.run_telling(children.command_line("verify", settings.to_argv()), dict(os.environ),
                                        self._verify_line)
            children.verdict(done, "verify")
        self.verified = True
        self.checkpoint()
        return store.load_verification(settings.out / f"{settings.script.stem}-verify")

    def _verify_line(self, line: str) -> None:
        """verify's progress as each variant finishes (its other lines stay with its output, for a failure)."""
        if line.startswith(VERIFY_SAYS):
            self.say(f"  {line[len(VERIFY_SAYS):]}")

    # -- the user's test ----------------------------------------------------------------------------------------
    def user_test(self, rec: Recommendation) -> UserTest:
        """Two fresh runs of the script with `rec` applied, side by side, compared after every step: its own training
        (`opbisect run`) for a script that trains, its step (a probe) for the target contract, which trains nothing
        by itself."""
        s = self.settings
        steps = "each to its end" if not s.check_steps else f"{s.check_steps} training steps each"
        self.say(f"the user's test: two fresh runs of {s.script.name} with the fix, {steps}")
        runs = UserTestRuns.started(s, self.staging, self.intercepted, patch=str(self.patch_csv) if rec.patch else "",
                                    seed=rec.seed, env=rec.env)
        if self.intercepted:
            return runs.compared(rec.command(str(s.script), list(s.script_args)))
        return runs.compared("two fresh processes of the target contract's step with the fix applied")
