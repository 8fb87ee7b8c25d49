"""report.html of `opbisect fix`: one self-contained page read off fix.json and verify's verification.json: the
rounds (what each found, what it patched, what was left), why they ended, verify's variants as a table and as a plot
of their cost against the plain step, and the lines that keep the fix in a training script.

Well-formed XHTML as well as HTML5, like the trace's page (report/html.py, whose style it shares); rows carry
data-round and data-variant attributes for scripts and tests.
"""

from __future__ import annotations

from html import escape

from ..record.fixing import Fix
from ..record.verification import Verification
from . import drawing, verify_view
from .html import CSS

FILENAME = "report.html"
KEPT = "kept from a stopped fix"  # beside a round's seconds where --resume took it back (here and in the summary)


def page(fix: Fix, verification: Verification | None, answer: list[str]) -> str:
    """The page; `answer`: the fix's first lines (report/fix_view.py), the verdict and the command."""
    verdict = "deterministic" if fix.exit_code == 0 else "nondeterministic"
    said, *command = answer
    return ('<!DOCTYPE html>\n<html xmlns="http://www.w3.org/1999/xhtml" lang="en"><head><meta charset="utf-8"/>'
            f"<title>opbisect fix {escape(fix.script)}</title><style>{CSS}</style></head><body>"
            f"<h1>opbisect fix <code>{escape(fix.script)}</code></h1>"
            f'<p class="verdict" data-verdict="{verdict}" data-exit="{fix.exit_code}">{escape(said)}</p>'
            + "".join(f"<pre>{escape(c.strip())}</pre>" for c in command)
            + _rounds(fix) + _test(fix) + _verify(verification) + _keep(fix) + "</body></html>\n")


def _rounds(fix: Fix) -> str:
    rows = "".join(
        f'<tr data-round="{r.number}" data-exit="{r.exit_code}" data-runs="{r.runs}" data-kept="{str(r.kept).lower()}">'
        f'<td class="num">{r.number}</td>'
        f'<td class="num">{r.runs or "-"}</td>'
        f"<td>{escape(' '.join(r.switches + ([f'--seed {r.seed}'] if r.seed else []))) or '-'}</td>"
        f'<td class="num">{len(r.patched)}</td>'
        f"<td>{'bitwise reproducible' if r.exit_code == 0 else _ops(r.sources)}</td><td>{_ops(r.new) or '-'}</td>"
        f'<td class="num">{r.seconds}{f" ({KEPT})" if r.kept else ""}</td>'
        f'<td><a href="{escape(r.report)}/summary.txt"><code>{escape(r.report)}'
        f"</code></a></td></tr>" for r in fix.rounds)
    return ("<h2>Rounds</h2><p>Each round traces the script with everything the rounds before it found applied: a "
            "source hides the sources after it.</p><div class=\"scroll\"><table><tr><th>round</th><th>runs</th>"
            "<th>switches, seed</th><th>ops patched</th><th>sources</th><th>new</th><th>seconds</th><th>report</th>"
            "</tr>"
            f"{rows}</table></div><p data-stopped=\"{escape(fix.stopped)}\">Rounds ended: {escape(fix.why)}.</p>")


def _test(fix: Fix) -> str:
    t = fix.test
    if t is None:
        return ""
    said = _said(t)
    # a script's test is a command to copy; the target contract's, two processes of its step (said in words)
    runs = (f"Two fresh runs of <code>{escape(t.command)}</code>" if "opbisect " in t.command
            else escape(t.command[:1].upper() + t.command[1:]))
    refuted = "".join(f'<p data-refuted="{escape(r.recommendation.variant)}">Passed over: <code>'
                      f"{escape(r.recommendation.command(fix.script, fix.script_args))}</code>, reproducible in "
                      f"one process; two fresh runs with it {escape(_said(r.test))}.</p>" for r in fix.refuted)
    return (f'<h2>The user\'s test</h2><p data-agreed="{str(t.agreed).lower()}">{runs}, '
            + (f"{t.steps} training steps each" if t.steps else "each to the script's end")
            + f": {escape(said)}.</p>" + refuted)


def _said(t) -> str:
    """What a user's test's two runs did, in words."""
    return "agree bit for bit" if t.agreed else (t.error or (
        f"differ {'at the training call' if t.first_apart == 0 else f'after step {t.first_apart}'}: "
        + ", ".join(t.apart[:8])))


def _ops(ops: list[str]) -> str:
    return ", ".join(f"<code>{escape(op)}</code>" for op in ops)


def _verify(verification: Verification | None) -> str:
    if verification is None:
        return ""
    rows = "".join(_variant_row(v) for v in verification.variants)
    plot = drawing.costs_svg(verification.variants)
    return (f"<h2>Verify: {verification.runs} runs of each variant</h2><div class=\"scroll\"><table><tr>"
            "<th>variant</th><th>runs</th><th>ms a step</th><th>against the plain step (95%)</th><th>what runs</th>"
            f"</tr>{rows}</table></div>" + (f"<figure>{plot}</figure>" if plot else "")
            + f"<p>Recommended: {escape(verification.recommendation or 'none')}.</p>")


def _variant_row(v) -> str:
    said = verify_view.outcome(v) + ("" if v.error else f" in {v.runs} runs")
    ms = "" if v.step_ms is None else f"{v.step_ms:.4g}"
    cost = "" if v.ratio is None else verify_view.cost(v)
    return (f'<tr data-variant="{escape(v.name)}" data-reproducible="{str(v.reproducible).lower()}">'
            f'<td>{escape(v.name)}</td><td>{escape(said)}</td><td class="num">{ms}</td>'
            f'<td class="num">{escape(cost)}</td><td>{escape(v.how)}</td></tr>')


def _keep(fix: Fix) -> str:
    if not fix.lines:
        return ""
    return ("<h2>To keep it, in the training script</h2><pre>"
            + escape("\n".join(fix.lines)) + "</pre>")
