"""report.html: one self-contained page (inline CSS and SVG, no script, no network), read off the record.

It is well-formed XHTML as well as HTML5, so tests parse it with an XML parser. Elements carry data-*
attributes (data-verdict, data-op, data-rank) for scripts and tests; prose is for people.
"""

from __future__ import annotations

from html import escape

from ..ir.graph import OpGraph
from ..ir.optypes import KIND_REMEDIES
from ..record.model import Record, Runs, Source
from . import drawing, text

FILENAME = "report.html"

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1em; max-width: 72em; color: #212121; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; border-bottom: 1px solid #ddd; padding-bottom: .2em; }
.meta { color: #616161; }
.verdict { padding: .6em 1em; border-radius: 6px; }
.verdict[data-verdict="nondeterministic"] { background: #fdecea; border-left: 6px solid #c62828; }
.verdict[data-verdict="deterministic"] { background: #e8f5e9; border-left: 6px solid #2e7d32; }
table { border-collapse: collapse; font-size: .9em; }
.scroll { overflow-x: auto; }
td code { overflow-wrap: anywhere; }
td.op { min-width: 16em; }
th, td { border: 1px solid #e0e0e0; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #fafafa; }
tr.detail td { color: #555; border-top: none; font-size: .95em; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code { font-size: .95em; }
li.warning { color: #b71c1c; } li.note { color: #424242; }
figure { margin: 1em 0; border: 1px solid #eee; padding: .5em; overflow-x: auto; }
figure svg { max-width: 100%; height: auto; }
.key { display: inline-block; padding: 0 .5em; margin-right: .5em; border: 1px solid; border-radius: 4px; }
"""

_COLUMNS = [("rank", "#"), ("op_name", "op"), ("op_type", "type"), ("kind", "kind"), ("first_step", "step"),
            ("iteration", "iteration"),
            ("seen_across", "seen across"), ("runs_differing", "runs off"), ("distinct_values", "distinct"),
            ("downstream_differing", "downstream"), ("affects_result", "reaches result"),
            ("max_abs_diff", "max |diff|"), ("max_ulp_diff", "max ulp"), ("frac_elements_differing", "elements")]
_NUMERIC = {"rank", "first_step", "iteration", "runs_differing", "distinct_values", "downstream_differing",
            "max_abs_diff", "max_ulp_diff", "frac_elements_differing"}


def _cell(name: str, value) -> str:
    if value is None:
        shown = "—"
    elif name == "frac_elements_differing":
        shown = f"{100 * value:.3g}%"
    elif isinstance(value, float):
        shown = f"{value:.3g}"
    elif isinstance(value, bool):
        shown = "yes" if value else "no"
    else:
        shown = str(value)
    if name == "op_name":
        return f'<td class="op"><code>{escape(shown)}</code></td>'
    return f'<td class="num">{escape(shown)}</td>' if name in _NUMERIC else f"<td>{escape(shown)}</td>"


def _pass_row(label: str, runs: Runs | None) -> str:
    if runs is None:
        return ""
    vary = runs.varying_variables()
    return (f'<tr data-pass="{escape(label)}"><td>{escape(label)}</td><td class="num">{len(runs.outputs)}</td>'
            f'<td class="num">{runs.distinct()}</td><td class="num">{len(vary)}</td>'
            f"<td>{escape(', '.join(vary[:6]) + (' …' if len(vary) > 6 else ''))}</td></tr>")


def _evidence(record: Record) -> str:
    f = record.facts
    rows = [_pass_row("uninstrumented, your grappler config", record.default.final()),
            _pass_row("uninstrumented, grappler pinned", record.pinned.final() if record.pinned else None),
            _pass_row("model.fit itself", record.fit.final() if record.fit else None),
            _pass_row(f"instrumented step 1 ({f.grappler.config} grappler)", record.analyses[0].instrumented.as_runs())]
    return (
        '<section id="evidence"><h2>Evidence</h2><table><thead><tr><th>pass</th><th>runs</th><th>distinct results</th>'
        f"<th>variables differing</th><th>which</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
        f'<p id="grappler" data-config="{f.grappler.config}">Analysis under the <b>{f.grappler.config}</b> grappler '
        f"configuration: {escape(f.grappler.reason)}.</p>"
        f'<p id="observer" data-effect="{f.observer.effect}">Observer effect: '
        f"{escape(text.observer_line(f.observer))}.</p>"
        + "".join(f"<p>{escape(line)}</p>" for line in text.fit_lines(record) + text.step_lines(record)
                  + text.replica_lines(record) + text.process_lines(record)
                  + text.ladder_lines(record))
        + "</section>")


def _verdict(record: Record) -> str:
    v = record.facts.verdict
    word = "nondeterministic" if v.nondeterministic else "deterministic"
    items = "".join(f"<li>{escape(e)}</li>" for e in v.evidence)
    top = record.sources[0] if record.sources and v.nondeterministic else None
    first = (f'<p>First bad op: <code data-op="{escape(top.op_name)}">{escape(top.op_name)}</code> '
             f"({escape(top.op_type)}, kind {escape(top.kind)}, step {top.first_step}).</p>") if top else ""
    return (f'<section id="verdict" class="verdict" data-verdict="{word}" data-exit-code="{v.exit_code}">'
            f"<h2>Verdict: {word} (exit {v.exit_code})</h2>{f'<ul>{items}</ul>' if items else ''}{first}</section>")


def _sources(record: Record) -> str:
    if not record.sources:
        return f'<section id="sources"><h2>Sources</h2><p>{escape(text.sources_lines(record)[0])}</p></section>'
    head = "".join(f"<th>{escape(title)}</th>" for _, title in _COLUMNS)
    rows = "".join(f'<tr data-op="{escape(s.op_name)}" data-rank="{s.rank}" data-kind="{escape(s.kind)}">'
                   + "".join(_cell(name, getattr(s, name)) for name, _ in _COLUMNS) + "</tr>" + _detail(s)
                   for s in record.sources)
    return (f'<section id="sources"><h2>Sources, ranked (what to fix first)</h2><div class="scroll"><table><thead>'
            f"<tr>{head}</tr></thead><tbody>{rows}</tbody></table></div></section>")


def _detail(s: Source) -> str:
    """Where the op was created and what to do, on a row of its own under the source's numbers."""
    parts = ([f"created at <code>{escape(s.source_location)}</code>"] if s.source_location else []) + \
        ([f"remedy: {escape(s.known_remedy)}"] if s.known_remedy else []) + \
        ([f"alone: {escape(text.replay_line(s))}"] if text.replay_line(s) else [])
    return f'<tr class="detail"><td></td><td colspan="{len(_COLUMNS) - 1}">{"; ".join(parts)}</td></tr>' \
        if parts else ""


def _neighbourhood(record: Record, graph: OpGraph, s: Source) -> str:
    # A body's tensor differs if it differs at any execution: the drawing is of the graph, not of one iteration.
    differing = {t.partition("@")[0] for t in record.analyses[min(s.first_step, len(record.analyses)) - 1].differing}
    svg = drawing.neighbourhood_svg(graph, s, differing)
    return (f'<figure data-op="{escape(s.op_name)}" data-rank="{s.rank}"><figcaption>#{s.rank} '
            f"<code>{escape(s.op_name)}</code> ({escape(s.op_type)}), step {s.first_step}</figcaption>{svg}</figure>")


def _neighbourhoods(record: Record) -> str:
    if not record.sources:
        return ""
    legend = "".join(f'<span class="key" style="background:{fill};border-color:{edge}">{escape(role)}</span>'
                     for role, (fill, edge) in drawing.ROLES.items())
    graph = OpGraph.from_json(record.graph)  # once for every source's drawing
    return (f'<section id="neighbourhoods"><h2>Around each source</h2><p>{legend} inputs are identical in every '
            f"run; the source varies; downstream ops vary with it or stay identical.</p>"
            + "".join(_neighbourhood(record, graph, s) for s in record.sources) + "</section>")


def _steps(record: Record) -> str:
    svg = drawing.steps_svg(record)
    return f'<section id="steps"><h2>Variables differing after each step</h2><figure>{svg}</figure></section>' \
        if svg else ""


def _findings(record: Record) -> str:
    if not record.findings:
        return ""
    items = "".join(f'<li class="{escape(f.level)}">{escape(f.level)}: {escape(f.message)}</li>'
                    for f in record.findings)
    return f'<section id="findings"><h2>Findings</h2><ul>{items}</ul></section>'


def _seeded(record: Record) -> str:
    """The seeded random ops: started anew every run, no sources; their draws are in no checkpoint."""
    if not record.seeded:
        return ""
    rows = "".join(f"<tr><td>{escape(d.op_name)}</td><td>{escape(d.op_type)}</td><td>{escape(d.site)}</td>"
                   f"<td>{escape(d.restart)}</td></tr>" for d in record.seeded)
    return ('<section id="seeded"><h2>Seeded random ops</h2><p>Each run started them where a fresh process starts '
            'them, so they are no sources. Their place in the sequence is in no checkpoint: '
            f'{escape(KIND_REMEDIES["checkpoint"])}.</p><table><tr><th>op</th><th>type</th><th>created at</th>'
            f'<th>started anew by</th></tr>{rows}</table></section>')


def render(record: Record) -> str:
    m = record.meta
    title = f"opbisect: {m.script}"
    meta = (f"{m.form} form, {record.runs} runs, {record.steps} step(s) on {m.device}; TF {m.tf_version}, "
            f"Keras {m.keras_version or '—'}; {m.ops} ops, {m.variables} variables; {m.fingerprinter}; {m.seconds} s")
    return ('<!DOCTYPE html>\n<html xmlns="http://www.w3.org/1999/xhtml" lang="en"><head><meta charset="utf-8"/>'
            f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
            f'<header><h1>{escape(title)}</h1><p class="meta">{escape(meta)}</p></header>'
            + _verdict(record) + _sources(record) + _evidence(record) + _steps(record) + _findings(record)
            + _seeded(record) + _neighbourhoods(record) + "</body></html>\n")


class HtmlReporter:
    filename = FILENAME

    def render(self, record: Record) -> str:
        return render(record)
