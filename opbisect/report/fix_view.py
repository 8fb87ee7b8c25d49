"""Views of a Fix (`opbisect fix`): the terminal lines and summary.txt (the answer first: whether two fresh runs of
the script agree with the fix, and the command that applies it), fix.json (the record), patch.csv (written by the
driver as the rounds went), report.html (report/fix_html.py). They decide nothing: every fact is the record's."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

from ..record import store
from ..record.fixing import AS_WRITTEN, Fix, Recommendation, Round, UserTest
from ..record.verification import Verification
from ..words import listed, printable, ruled_out
from . import fix_html

TEXT = "summary.txt"


def answer(fix: Fix) -> list[str]:
    """The first lines: the verdict with the user's test behind it, and the command to run."""
    rec, test = fix.recommendation, fix.test
    head = f"opbisect fix {fix.script}: "
    if rec is None:
        return [head + f"no configuration found, exit 1: the rounds ended because {fix.why}"]
    command = rec.command(fix.script, fix.script_args)
    if test is None or not test.agreed:
        out = [head + f"NOT reproducible, exit 1: {_apart(test)}", f"  tried: {command}"] + _refuted(fix)
        if test is not None and test.parts_elsewhere():  # a step this fix never traced: trace it
            out.append(f"  next: {_fix_at(fix, test.apart_call)}   (the runs part in training call "
                       f"{test.apart_call}, which this fix did not analyse)")
        return out
    what = describe(rec)
    steps = f"{test.ran[0]} training steps" + (", the script's end" if test.to_the_end else "")
    return [head + f"reproducible {what}, exit 0: two fresh runs agree bit for bit through {steps} "
                   f"({ruled_out(test.rate_bound, 'steps')})",
            f"  run it so: {command}"] + _refuted(fix)


def _refuted(fix: Fix) -> list[str]:
    """The cheaper configurations the user's test passed over: reproducible in one process, not across two."""
    return [f"  passed over: {describe(r.recommendation)}: reproducible in one process, but {_apart(r.test)}"
            for r in fix.refuted]


def _fix_at(fix: Fix, call: str) -> str:
    """The fix of another training call of the script, into a folder of its own (one --out holds one fix)."""
    tail = ["--", *fix.script_args] if fix.script_args else []
    out = Path(fix.out or "reports") / f"at-{call.replace(':', '-')}"  # beside the first fix's folder
    return shlex.join(["opbisect", "fix", fix.script, "--at", call, "--out", str(out), *tail])


def describe(rec: Recommendation) -> str:
    """What a recommendation applies, in words: 'as written', 'with opbisect's patch, --seed 7 (1.02x the plain
    step)'."""
    if rec.variant == AS_WRITTEN:
        return "as written"
    parts = (["opbisect's patch"] if rec.patch else []) + [f"{k}={v}" for k, v in sorted(rec.env.items())]
    parts += [f"--seed {rec.seed}"] if rec.seed else []
    unlike = ", timed on a step that skipped the plain step's update" if rec.unlike_plain else ""
    cost = f" ({rec.ratio:.2f}x the plain step{unlike})" if rec.ratio is not None else ""
    return "with " + ", ".join(parts) + cost


def _apart(test: UserTest | None) -> str:
    if test is None:
        return "the user's test did not run"
    if test.error:
        return f"a run of the user's test failed: {test.error}"
    if test.first_apart is None:
        return f"the two runs trained {' and '.join(map(str, test.ran))} steps"
    at = "at the training call" if test.first_apart == 0 else f"after step {test.first_apart}"
    return f"two fresh runs with the fix differ {at} ({len(test.apart)} variable(s): {listed(test.apart)})"


def round_line(r: Round) -> str:
    applied = [f"{len(r.patched)} op(s) patched" if r.patched else "as written"]
    applied += [f"--seed {r.seed}"] if r.seed else []
    applied += [f"under {' '.join(r.switches)}"] if r.switches else []
    did = ", ".join(applied) + (f", {r.runs} runs" if r.runs else "")
    took = f"{r.seconds} s" + (f" ({fix_html.KEPT})" if r.kept else "")
    if r.exit_code == 0:
        return f"round {r.number} ({did}): bitwise reproducible, {took}"
    cause = f"; cause pinned by experiment: {', '.join(r.cause)}" if r.cause else ""
    new = f"{len(r.new)} new: {listed(r.new)}" if r.new else "none new"
    return f"round {r.number} ({did}): {len(r.sources)} source(s), {new}{cause}, {took}"


def lines(fix: Fix, folder: Path | None = None) -> list[str]:
    out = answer(fix) + [f"{len(fix.rounds)} round(s):"] + [f"  {round_line(r)}" for r in fix.rounds]
    out.append(f"rounds ended: {fix.why}")
    if fix.checked_on:  # `opbisect run` of its patch warns under another TensorFlow
        out.append(f"checked under TensorFlow {fix.checked_on.get('tensorflow')} on {fix.checked_on.get('device')}")
    if fix.lines:
        out.append("to keep it in the script instead of `opbisect run`:")
        out += [f"    {line}" for line in fix.lines]
    if folder is not None:
        out.append(f"report: {folder}")
    return [printable(line) for line in out]


def write(fix: Fix, verification: Verification | None, folder: store.ReportFolder) -> Path:
    """The fix's views into its staged folder (beside the rounds' and verify's reports), then the folder moved into
    place as one unit, every path in it naming the final folder."""
    folder.write(store.FIX_RECORD, json.dumps(dataclasses.asdict(fix), indent=1))
    folder.write(TEXT, "\n".join(lines(fix)) + "\n")
    folder.write(fix_html.FILENAME, fix_html.page(fix, verification, answer(fix)))
    folder.point_at_final()
    return folder.commit()
