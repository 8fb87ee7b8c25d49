"""`opbisect fix`: from a script to a verified fix in one command.

    run_fix(settings)
      ReportFolder(<stem>-fix).prepare()        record/store.py
      round k = 1, 2, ...                         `opbisect trace --patch <every earlier round's CSV>`, a fresh
                                                  process under the family switches the ops with no rewrite need
        until a round's step is reproducible, a round names nothing new, or --max-rounds
      verify                                      `opbisect verify --patch <every round's CSV>`, a fresh process
      patch.csv, fix.json, summary.txt,           every patched op with its round; the record; the lines to add;
      report.html                                 the rounds and verify's costs on one page (report/fix_html.py)

A source hides the sources after it (its difference reaches them, so they cannot be told apart): the LM head's
cross-entropy hid two BiasAddGrads and Adam's segment sums, ResNet50 needed four rounds. Each round traces the
step with everything found so far replaced, so it names what the earlier ones hid. Each round and verify run in
fresh processes, since a family switch (an environment variable) is read once, when TensorFlow starts.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import pandas as pd
import pydantic

from .errors import EXIT_CLEAN, EXIT_FOUND
from .ir.optypes import KIND_REMEDIES
from .patches.registry import has_rewrite, switch_of, switches_on
from .patches.selection import FIX_CSV_NAME as PATCH_CSV
from .record import store
from .record.fixing import AS_WRITTEN, Fix, Round
from .record.verification import Verification
from .report import fix_html
from .settings import FixSettings
from .words import listed, printable

RECORD = "fix.json"
TEXT = "summary.txt"


def run_fix(settings: FixSettings, echo=print) -> int:
    from .targets.loader import script_path

    settings.validate()
    folder = store.ReportFolder(settings.out, f"{settings.script.stem}-fix", str(script_path(settings.script)))
    with folder.prepare():
        fix, patch, verified = _fix(settings, folder.staging, folder.final,
                                    echo if settings.progress else lambda line: None)
        folder.write(PATCH_CSV, patch.to_csv(index=False))
        folder.write(RECORD, json.dumps(dataclasses.asdict(fix), indent=1))
        folder.write(TEXT, "\n".join(lines(fix)) + "\n")
        folder.write(fix_html.FILENAME, fix_html.page(fix, verified))
        folder.point_at_final()
        final = folder.commit()
    for line in lines(fix, final):
        echo(line)
    return fix.exit_code


def _fix(settings: FixSettings, staging: Path, final: Path, say) -> tuple[Fix, pd.DataFrame, Verification | None]:
    """The rounds, then verify: the record, patch.csv's rows, and verify's record (None where none ran)."""
    stem = settings.script.stem
    rounds: list[Round] = []
    found: list[pd.DataFrame] = []
    named: list[str] = []
    stopped = f"--max-rounds {settings.max_rounds} reached"
    form = "step"
    for k in range(1, settings.max_rounds + 1):
        switches = _switches(found)
        csvs = [str(staging / r.report / "sources.csv") for r in rounds]
        began = time.time()
        report = staging / f"round{k}"
        looks = ["--runs", str(settings.runs), "--max-runs", str(settings.round_max_runs())]
        code = _child("trace", settings.script, [*looks, "--no-progress", "--out", str(report),
                                                 *(["--patch", ",".join(csvs)] if csvs else []), *_common(settings)],
                      switches, f"round {k}")
        summary = json.loads((report / stem / store.SUMMARY_JSON).read_text())
        form = summary["form"] if k == 1 else form
        rows = pd.read_csv(report / stem / "sources.csv", dtype=str, keep_default_na=False)
        new = [op for op in rows["op_name"] if op not in named]
        rounds.append(Round(number=k, exit_code=code, switches=switches, patched=list(summary.get("patched", [])),
                            sources=list(rows["op_name"]), new=new, seconds=round(time.time() - began, 1),
                            report=f"round{k}/{stem}", runs=int(summary["runs"])))
        say(round_line(rounds[-1]))
        if code == EXIT_CLEAN:
            stopped = (f"round {k}: the step is bitwise reproducible as written" if k == 1 else
                       f"round {k}: the step with every source of {_rounds_before(k)} patched is bitwise reproducible")
            break
        if rows.empty:  # it looked harder already (--max-runs): capture's runs never varied where the step's did
            stopped = (f"round {k}: the step varied but no op could be named, also in {rounds[-1].runs} runs "
                       f"(see its report's observer effect)")
            break
        if not new:
            stopped = f"round {k} named no new source ({listed(list(rows['op_name']))} stay: no patch replaced them)"
            break
        fresh = rows[rows["op_name"].isin(new)]
        unfixable = fresh[fresh["kind"].isin(KIND_REMEDIES)]
        if len(unfixable) == len(fresh):  # an input, unrestored state, an unseeded random op: no patch fixes it
            stopped = (f"round {k}'s new sources are no op's own variation: "
                       + "; ".join(f"{r.op_name} (kind {r.kind}: {KIND_REMEDIES[r.kind]})"
                                   for r in unfixable.itertuples()))
            break
        found.append(fresh[~fresh["kind"].isin(KIND_REMEDIES)].assign(round=k))
        named += new
    patch = pd.concat(found, ignore_index=True) if found else pd.DataFrame(columns=["round", "op_name", "kind"])
    fix = Fix(script=str(settings.script), script_path=str(settings.script.resolve()), form=form, rounds=rounds,
              stopped=stopped, switches=_switches(found))
    if rounds[0].exit_code == EXIT_CLEAN:
        fix.recommendation = AS_WRITTEN
        return fix, patch, None
    if patch.empty:
        return fix, patch, None
    patch_csv = staging / PATCH_CSV
    patch.to_csv(patch_csv, index=False)  # verify reads it there; the folder keeps it (written again, the same)
    say(f"verify: --patch {PATCH_CSV} ({len(patch)} op(s)), {settings.verify_runs} runs of each variant")
    _child("verify", settings.script, ["--patch", str(patch_csv), "--runs", str(settings.verify_runs),
                                       "--timing-runs", str(settings.timing_runs), "--out", str(staging / "verify"),
                                       "--cpu-reference", settings.cpu_reference,
                                       *_common(settings)], [], "verify")
    decided = json.loads((staging / "verify" / f"{settings.script.stem}-verify" / "verification.json").read_text())
    fix.verify = f"verify/{settings.script.stem}-verify"
    fix.recommendation = decided["recommendation"]
    chosen = next((v for v in decided["variants"] if v["name"] == fix.recommendation), None)
    fix.recommended_ratio = chosen["ratio"] if chosen else None
    fix.lines = keep_lines(fix.recommendation, fix.form, final / PATCH_CSV)
    return fix, patch, pydantic.TypeAdapter(Verification).validate_python(decided)


def _rounds_before(k: int) -> str:
    return "round 1" if k == 2 else f"rounds 1-{k - 1}"


def _common(settings: FixSettings) -> list[str]:
    """The options every child shares, the script's own arguments last."""
    return ["--device", settings.device, "--fingerprint", settings.fingerprint, "--step", settings.step_name,
            "--inputs", settings.inputs_name, *(["--at", settings.at] if settings.at else []),
            *(["--", *settings.script_args] if settings.script_args else [])]


def _switches(found: list[pd.DataFrame]) -> list[str]:
    """The family switches the sources found so far need: those with no rewrite (cuDNN's MaxPoolGrad), and those
    this process's environment already sets (the user's)."""
    types = {t for rows in found for t in rows.get("op_type", [])}
    needed = {switch_of(t) for t in types if switch_of(t) and not has_rewrite(t)}
    return sorted(needed | set(switches_on()))


def _child(command: str, script: Path, args: list[str], switches: list[str], what: str) -> int:
    """`opbisect COMMAND SCRIPT ARGS` in a fresh process under `switches`: its verdict (0 or 1); any other exit
    raises the error it names, with the child's last lines."""
    from .execute.processes import _run_child, child_error

    env = {**os.environ, **{name: "1" for name in switches}}
    done = _run_child([sys.executable, "-m", "opbisect", command, str(script), *args], env)
    if done.returncode not in (EXIT_CLEAN, EXIT_FOUND):
        sys.stderr.write(done.stderr[-4000:])
        raise child_error(done.returncode)(f"{what} failed (exit {done.returncode})")
    return done.returncode


def keep_lines(recommendation: str, form: str, patch_csv: Path) -> list[str]:
    """What a training script needs to keep the recommended configuration."""
    name = "model" if form in ("keras", "fit") else "step"
    patched = f'{name} = opbisect.deterministic({name}, "{patch_csv}")  # after {name} is built, before training'
    if recommendation.startswith("patched"):
        switches = recommendation.split(" + ")[1:]
        env = [f'os.environ["{s.split("=")[0]}"] = "1"  # before TensorFlow is imported' for s in switches]
        return ["import opbisect", *env, patched]
    if recommendation == "global switch":
        return ["tf.config.experimental.enable_op_determinism()  # before the model is built"]
    if recommendation.endswith("=1"):
        return [f'os.environ["{recommendation[:-2]}"] = "1"  # before TensorFlow is imported']
    return []


def round_line(r: Round) -> str:
    under = f" under {' '.join(s + '=1' for s in r.switches)}" if r.switches else ""
    did = (f"{len(r.patched)} op(s) patched" if r.patched else "as written") + under
    did += f", {r.runs} runs" if r.runs else ""
    if r.exit_code == EXIT_CLEAN:
        return f"round {r.number} ({did}): bitwise reproducible, {r.seconds} s"
    return (f"round {r.number} ({did}): {len(r.sources)} source(s), {len(r.new)} new: {listed(r.new)}, "
            f"{r.seconds} s")


def lines(fix: Fix, folder: Path | None = None) -> list[str]:
    out = [f"opbisect fix {fix.script}: {len(fix.rounds)} round(s)"]
    out += [f"  {round_line(r)}" for r in fix.rounds]
    out.append(f"rounds ended: {fix.stopped}")
    if fix.switches:
        out.append(f"family switches the patched ops with no rewrite need: {', '.join(fix.switches)}")
    if fix.recommendation == AS_WRITTEN:
        out.append("recommendation: none needed, the step is bitwise reproducible as written (exit 0)")
    elif fix.recommendation:
        cost = f" ({fix.recommended_ratio:.2f}x the plain step)" if fix.recommended_ratio is not None else ""
        out.append(f"recommendation: {fix.recommendation}{cost}, bitwise reproducible in verify (exit 0)")
        if fix.lines:
            out.append("to keep it, in the training script:")
            out += [f"    {line}" for line in fix.lines]
    else:
        out.append("no configuration was bitwise reproducible (exit 1)" + (f": see {fix.verify}" if fix.verify
                                                                            else ": nothing found could be patched"))
    if folder is not None:
        out.append(f"report: {folder}")
    return [printable(line) for line in out]
