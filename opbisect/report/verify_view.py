"""Views of a Verification (`opbisect verify`): the terminal lines, `variants.csv`, and the record itself.

They decide nothing: the recommendation and the exit code are the record's.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd

from ..record import store
from ..record.model import rate_bound
from ..record.verification import PATCHED, PLAIN, XLA_FLAGS, XLA_SWITCHES, Verification
from ..words import confirmed_on, listed, printable, ruled_out

RECORD = store.VERIFY_RECORD
CSV = "variants.csv"
TEXT = "summary.txt"
COLUMNS = ["variant", "reproducible", "distinct", "runs", "step_ms", "timed", "ratio", "ratio_low", "ratio_high",
           "max_abs_diff", "max_ulp", "cpu_abs_diff", "cpu_ulp", "reference", "comparable", "autotuned", "error",
           "how"]


def frame(v: Verification) -> pd.DataFrame:
    rows = [{"variant": x.name, "reproducible": x.reproducible, **{k: getattr(x, k) for k in COLUMNS[2:]}}
            for x in v.variants]
    return pd.DataFrame(rows, columns=COLUMNS)


def _ratio(x) -> str:
    return f"{x.ratio:.2f}x" if x.ratio is not None else "-"


def _interval(x) -> str:
    return f"; 95%: {x.ratio_low:.2f}-{x.ratio_high:.2f}x" if x.ratio_low is not None else ""


def cost(x) -> str:
    """A variant's step time against the plain step's, with its 95% interval: '1.03x; 95%: 0.98-1.08x'."""
    return f"{_ratio(x)}{_interval(x)}"


def outcome(x) -> str:
    """What a variant's runs gave: 'raised: ...', 'bitwise reproducible' or 'N distinct results', and whether its
    convolutions were autotuned."""
    if x.error:
        return f"raised: {x.error}"
    same = "bitwise reproducible" if x.reproducible else f"{x.distinct} distinct results"
    return same + (" (convolutions autotuned)" if x.autotuned else "")


PROGRESS = "verify: "  # how each progress line begins: a fix picks verify's out of its child's stderr by it


def starting(runs: int, confirming: int, timing_runs: int) -> str:
    """verify's first progress line (stderr): what the plain and the patched step run, before they start."""
    timed = f", then {timing_runs} timed steps each, in turn" if timing_runs else ""
    return f"{PROGRESS}the plain and the patched step, {runs} runs each{confirmed_on(confirming)}{timed}"


def finished(x, seconds: float | None) -> str:
    """verify's progress line as a variant finishes (stderr): its outcome, runs and cost, and the seconds it took
    (None: run in turn with another, whose line has them)."""
    runs = f" in {x.runs} runs, {cost(x)}" if not x.error else ""
    took = f" ({seconds:.0f} s)" if seconds is not None else ""
    return f"{PROGRESS}{x.name}: {outcome(x)}{runs}{took}"


def _row(x, width: int) -> str:
    if x.error:
        return f"  {x.name:<{width}} {outcome(x)}"
    same = outcome(x)
    agree = "" if x.max_abs_diff is None else f", max |diff| vs plain {x.max_abs_diff:.3g} ({x.max_ulp} ulp)"
    if x.cpu_abs_diff is not None:
        agree += f", vs the CPU {x.cpu_abs_diff:.3g} ({x.cpu_ulp} ulp)"
    if not x.comparable:
        agree = ", not compared (started from other values)"
    return f"  {x.name:<{width}} {same} in {x.runs} runs, {x.step_ms} ms a step ({cost(x)}){agree}{_unlike(x)}"


def _unlike(x) -> str:
    """Where its step and the plain step updated different variables: one of them skipped an update."""
    if not x.unlike_plain:
        return ""
    return (f"; NOT the plain step's update: {len(x.unlike_plain)} variable(s) changed in one and not the other "
            f"({listed(x.unlike_plain, 3)}): a skipped update (a loss scale's non-finite gradient?), so its time "
            f"is another step's")


def _timing(v: Verification) -> str:
    if not v.timing_runs:
        return "step times: the median of each variant's runs above; its ratio's 95% bootstrap interval"
    others = any(x.name not in (PLAIN, PATCHED) for x in v.variants)
    timed = f"{v.timing_runs} steps" if v.steps == 1 else f"{v.timing_runs} runs of {v.steps} steps (a step's share)"
    return (f"step times: the median of {timed} of each variant timed after its runs (plain and patched "
            f"in turn{', the others in their own processes' if others else ''}); its ratio's 95% bootstrap interval")


def lines(v: Verification, written: Path | None = None) -> list[str]:
    each = f" ({v.steps} consecutive steps each, from the data's first batch)" if v.steps > 1 else ""
    out = [f"opbisect verify {v.script} --patch {v.patch}: {v.runs} runs of each variant{confirmed_on(v.confirm_runs)}"
           f"{each} on {v.device}",
           f"replaced {len(v.replaced)} op(s): {listed(v.replaced) or 'none'}"]
    out += [f"matched by structure: {named} is {op} here (scopes renumbered)" for named, op in v.renamed.items()]
    out += [f"not replaced: {op}: {why}" for op, why in v.skipped.items()]
    out += [f"no patch for source {op} (kind {kind}): fix it where the report's remedy says"
            for op, kind in v.not_ops.items()]
    width = max([44] + [len(x.name) for x in v.variants])  # the names in one column
    out += [_row(x, width) for x in v.variants] + [_timing(v)] + _pinned(v)
    if v.plain_spread:
        out.append(f"the plain step's own run-to-run spread: max |diff| {v.plain_spread:.3g}")
    reference = next((x for x in v.variants if x.reference), None)
    if reference is not None and not reference.error:
        out.append(f"{reference.name}: a yardstick for the numbers (its own summation order), never recommended")
    out += _recommendation(v)
    runs = v.variant(v.fixed_by).runs if v.fixed_by else 0
    out.append(f"the patched step is bitwise reproducible ({v.fixed_by}; exit {v.exit_code}); "
               f"{ruled_out(rate_bound(runs))} ({runs} runs; more, by --confirm-runs, rule out rarer ones)"
               if v.fixed_by else
               f"the patched step is NOT bitwise reproducible (exit {v.exit_code})")
    if written is not None:
        out.append(f"report: {written}")
    return [printable(line) for line in out]


def _pinned(v: Verification) -> list[str]:
    """Where the patched step varied and gave one result under one of XLA's switches: what varies is in what XLA
    compiled, and the narrowest switch that stopped it says what kind of choice it is (the wider ones turn off that
    choice and more, so they say less)."""
    patched = v.variant(PATCHED)
    if patched is None or patched.reproducible or patched.error:
        return []
    stopped = {x.env[XLA_FLAGS] for x in v.patched() if x.env.get(XLA_FLAGS) in XLA_SWITCHES and x.reproducible}
    narrowest = next((flag for flag in XLA_SWITCHES if flag in stopped), None)
    if narrowest is None:
        return []
    return [f"pinned by experiment: the patched step varies, and under {narrowest} it does not: what still varies is "
            f"{XLA_SWITCHES[narrowest][1]}"]


def _recommendation(v: Verification) -> list[str]:
    if v.recommendation == PLAIN:
        return ["recommendation: plain: the step gave one result in every run; nothing to fix in these runs"]
    if not v.recommendation:
        return ["recommendation: none: no variant was bitwise reproducible"]
    best = v.variant(v.recommendation)
    out = [f"recommendation: {best.name} ({_ratio(best)} the plain step{_interval(best)}), the cheapest bitwise "
           f"reproducible variant"]
    if v.untold:
        out.append(f"  these timings do not tell it apart from: {', '.join(v.untold)} (their 95% intervals overlap; "
                   f"more --timing-runs narrow them)")
    if v.in_one_process:
        out.append(f"  passed over: {', '.join(v.in_one_process)}: the same bits in this process, but cuDNN "
                   f"autotuning picks their convolutions' algorithms by timing in each process, so another process "
                   f"may pick others (only op determinism takes the first that works)")
    if best.unlike_plain:
        out.append(f"  its step did not update what the plain step updates ({len(best.unlike_plain)} variable(s) "
                   f"differ in being changed): its cost is another step's; the user's test says whether training "
                   f"with it agrees")
    if best.autotuned:
        out.append("  its convolutions are autotuned: the same bits in this process; another process may pick other "
                   "cuDNN algorithms (check with `opbisect trace --processes`)")
    return out


def write(v: Verification, folder: store.ReportFolder) -> Path:
    record = json.dumps(dataclasses.asdict(v))
    summary = json.dumps({"script_path": v.script_path, "recommendation": v.recommendation,
                          "fixed_by": v.fixed_by, "exit_code": v.exit_code})
    views = [(RECORD, record), (store.SUMMARY_JSON, summary), (CSV, frame(v).to_csv(index=False)),
             (TEXT, "\n".join(lines(v)) + "\n")]
    for name, content in views:
        folder.write(name, content)
    return folder.commit()
