"""report.html: one self-contained page (inline CSS and SVG, no script, no network), read off the record.

It is well-formed XHTML as well as HTML5, so tests parse it with an XML parser. Elements carry data-*
attributes (data-verdict, data-op, data-rank) for scripts and tests; prose is for people.
"""

from __future__ import annotations

from html import escape

from ..ir.graph import OpGraph
from ..ir.optypes import KIND_REMEDIES
from ..record.model import Record, Runs, Source
from . import answer, drawing, text

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
pre.next { background: #263238; color: #eceff1; padding: .6em 1em; border-radius: 6px; white-space: pre-wrap;
  overflow-wrap: anywhere; }
nav#contents { margin: 1em 0; line-height: 1.8; } nav#contents a { margin-right: 1em; }
details summary { cursor: pointer; color: #37474f; } details ul { margin: .3em 0; }
code { overflow-wrap: anywhere; } td.remedy { max-width: 32em; }
"""

def _op(name: str) -> str:
    """An op's id, breakable after each `/` and `::` (they run to 100 characters)."""
    return escape(name).replace("/", "/<wbr/>").replace("::", "::<wbr/>")


def _link(href: str, text: str) -> str:
    return f'<a href="{escape(href)}">{escape(text)}</a>'


def _pass_row(label: str, runs: Runs | None) -> str:
    if runs is None:
        return ""
    vary = runs.varying_variables()
    return (f'<tr data-pass="{escape(label)}"><td>{escape(label)}</td><td class="num">{len(runs.outputs)}</td>'
            f'<td class="num">{runs.distinct()}</td><td class="num">{len(vary)}</td>'
            f"<td>{escape(', '.join(vary[:6]) + (' …' if len(vary) > 6 else ''))}</td></tr>")


def _evidence(record: Record) -> str:
    f = record.facts
    rows = [_pass_row("the step as you run it (your grappler config)", record.default.final()),
            _pass_row("the same, grappler's rewrites pinned", record.pinned.final() if record.pinned else None),
            _pass_row("model.fit itself", record.fit.final() if record.fit else None),
            _pass_row(f"step 1 with its tensors fingerprinted ({f.grappler.config} grappler)",
                      record.analyses[0].instrumented.as_runs())]
    return (
        '<section id="evidence"><h2>How it was found</h2><table><thead><tr><th>pass</th><th>runs</th>'
        f"<th>distinct results</th><th>variables differing</th><th>which</th></tr></thead><tbody>{''.join(rows)}"
        "</tbody></table>"
        f'<p id="grappler" data-config="{f.grappler.config}">Analysis under the <b>{f.grappler.config}</b> grappler '
        f"configuration: {escape(f.grappler.reason)}.</p>"
        f'<p id="observer" data-effect="{f.observer.effect}">Observer effect: '
        f"{escape(text.observer_line(f.observer))}.</p>"
        + "".join(f"<p>{escape(line)}</p>" for line in text.fit_lines(record) + text.step_lines(record)
                  + text.replica_lines(record) + text.process_lines(record)
                  + text.ladder_lines(record))
        + "</section>")


def _verdict(record: Record) -> str:
    """The answer first: the verdict, what differs, what to do, the next command (report/answer.py)."""
    a = answer.answer(record)
    word = "nondeterministic" if record.facts.verdict.nondeterministic else "deterministic"
    do = f'<p class="do"><b>Do:</b> {escape(a.do)}</p>' if a.do else ""
    nxt = f'<p>Next:</p><pre class="next">{escape(a.next)}</pre>' if a.next else ""
    items = "".join(f"<li>{escape(e)}</li>" for e in record.facts.verdict.evidence)
    return (f'<section id="verdict" class="verdict" data-verdict="{word}" data-exit-code="{a.exit_code}">'
            f"<h2>{a.verdict} (exit {a.exit_code})</h2><p class=\"what\">{escape(a.what)}</p>{do}{nxt}"
            + (f"<details><summary>the evidence for this verdict</summary><ul>{items}</ul></details>" if items else "")
            + "</section>")


_SOURCE_HEAD = ["#", "op", "type", "kind", "step", "distinct values", "reaches the result", "ops after it differing"]


def _sources(record: Record) -> str:
    if not record.sources:
        return f'<section id="sources"><h2>Sources</h2><p>{escape(text.sources_lines(record)[0])}</p></section>'
    head = "".join(f"<th>{escape(h)}</th>" for h in _SOURCE_HEAD)
    rows = "".join(_group_rows(record, g) for g in answer.groups(record))
    return (f'<section id="sources"><h2>Sources, ranked (what to fix first)</h2><p>{len(record.sources)} source(s) in '
            f"{len(answer.groups(record))} finding(s): sources that share a kind, an op type and a remedy are one "
            f'finding.</p><div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
            f"</div></section>")


def _group_rows(record: Record, g: answer.Group) -> str:
    s = g.first
    more = f" and {len(g.sources) - 1} more" if len(g.sources) > 1 else ""
    across = " across processes" if s.seen_across == "processes" else ""
    cells = [str(s.rank), f"<code>{_op(s.op_name)}</code>{escape(more)}", escape(s.op_type), escape(s.kind + across),
             str(s.first_step), f"{s.distinct_values} in {s.runs} {'processes' if across else 'runs'}",
             "yes" if s.affects_result else "no", str(s.downstream_differing)]
    row = (f'<tr data-op="{escape(s.op_name)}" data-rank="{s.rank}" data-kind="{escape(s.kind)}" '
           f'data-count="{len(g.sources)}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return row + f'<tr class="detail"><td></td><td colspan="{len(_SOURCE_HEAD) - 1}">{_detail(g)}</td></tr>'


def _detail(g: answer.Group) -> str:
    """What a finding's row folds: where, what to do, how much, alone, and every source of the group."""
    s = g.first
    parts = ([f"<li>created at <code>{escape(s.source_location)}</code></li>"] if s.source_location else []) + \
        ([f"<li>{escape(s.detail)}</li>"] if s.detail else []) + \
        ([f"<li>remedy: {escape(s.known_remedy)}</li>"] if s.known_remedy else [])
    if s.max_abs_diff is not None:
        parts.append(f"<li>magnitude: {escape(text._magnitude(s).lstrip('; '))}</li>")
    alone = text.replay_line(s)
    if alone:
        link = f" ({_link(s.reproducer, 'the reproducer')})" if s.reproducer else ""
        parts.append(f"<li>run alone: {escape(alone)}{link}</li>")
    if len(g.sources) > 1:
        members = "".join(f'<li data-op="{escape(m.op_name)}"><code>{_op(m.op_name)}</code>'
                          + (f" ({escape(m.detail)})" if m.detail and m.kind == "init" else "") + "</li>"
                          for m in g.sources)
        parts.append(f"<li>all {len(g.sources)}:<ul>{members}</ul></li>")
    return f"<details><summary>where, what to do, how much</summary><ul>{''.join(parts)}</ul></details>"


def _fresh(record: Record) -> str:
    """The fresh-process check and its experiment."""
    f = record.fresh
    if f is None:
        return ""
    said = escape(text.fresh_lines(record)[0])
    tried = ""
    if f.cause is not None:
        rows = "".join(f"<tr><td>{escape(' + '.join(t))}</td><td>{'agree' if ok else 'differ'}</td></tr>"
                       for t, ok in zip(f.cause.tried, f.cause.agreed))
        tried = ("<p>The cause, by experiment: a pair of fresh processes for each set of sources pinned, until a pair "
                 f"agreed.</p><table><tr><th>pinned</th><th>the pair</th></tr>{rows}</table>")
    script = "".join(f'<p data-script-apart="{str(f.script_apart).lower()}">{escape(line)}</p>'
                     for line in text.script_lines(f.script))
    return f'<section id="fresh"><h2>Two fresh processes</h2><p data-apart="{str(f.apart).lower()}">{said}</p>' \
           f"{tried}{script}</section>"


def _files(record: Record) -> str:
    names = ["summary.txt", "sources.csv", "report.json", "record.json"]
    names += ["script_output.txt"] if record.meta.intercepted else []
    names += sorted({s.reproducer for s in record.sources if s.reproducer})
    return f'<section id="files"><h2>Files</h2><p>{" · ".join(_link(n, n) for n in names)}</p></section>'


def _neighbourhood(record: Record, graph: OpGraph, s: Source) -> str:
    # A body's tensor differs if it differs at any execution: the drawing is of the graph, not of one iteration.
    differing = {t.partition("@")[0] for t in record.analyses[min(s.first_step, len(record.analyses)) - 1].differing}
    svg = drawing.neighbourhood_svg(graph, s, differing)
    return (f'<figure data-op="{escape(s.op_name)}" data-rank="{s.rank}"><figcaption>#{s.rank} '
            f"<code>{escape(s.op_name)}</code> ({escape(s.op_type)}), step {s.first_step}</figcaption>{svg}</figure>")


def _neighbourhoods(record: Record) -> str:
    graph = OpGraph.from_json(record.graph)  # once for every source's drawing
    ops = [s for s in record.sources if s.op_name in graph.g]  # a variable or a batch (the fresh check's) is no op
    if not ops:
        return ""
    legend = "".join(f'<span class="key" style="background:{fill};border-color:{edge}">{escape(role)}</span>'
                     for role, (fill, edge) in drawing.ROLES.items())
    return (f'<section id="neighbourhoods"><h2>Around each source</h2><p>{legend} inputs are identical in every '
            f"run; the source varies; downstream ops vary with it or stay identical.</p>"
            + "".join(_neighbourhood(record, graph, s) for s in ops) + "</section>")


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


def _contents(sections: list[tuple[str, str]]) -> str:
    return '<nav id="contents">' + "".join(_link(f"#{ident}", title) for ident, title in sections) + "</nav>"


def render(record: Record) -> str:
    m = record.meta
    title = f"opbisect: {m.script}"
    meta = (f"{m.form} form, {record.runs} runs, {record.steps} step(s) on {m.device}; TF {m.tf_version}, "
            f"Keras {m.keras_version or '-'}; {m.ops} ops, {m.variables} variables; {m.fingerprinter}; {m.seconds} s")
    parts = [("sources", "Sources", _sources(record)), ("fresh", "Two fresh processes", _fresh(record)),
             ("evidence", "How it was found", _evidence(record)), ("steps", "Per step", _steps(record)),
             ("magnitudes", "How much", _magnitudes(record)), ("findings", "Findings", _findings(record)),
             ("seeded", "Seeded random ops", _seeded(record)),
             ("neighbourhoods", "Around each source", _neighbourhoods(record)), ("files", "Files", _files(record))]
    shown = [(ident, title_, html) for ident, title_, html in parts if html]
    return ('<!DOCTYPE html>\n<html xmlns="http://www.w3.org/1999/xhtml" lang="en"><head><meta charset="utf-8"/>'
            f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
            f'<header><h1>{escape(title)}</h1><p class="meta">{escape(meta)}</p></header>'
            + _verdict(record) + _contents([(i, t) for i, t, _ in shown]) + "".join(h for _, _, h in shown)
            + "</body></html>\n")


def _magnitudes(record: Record) -> str:
    svg = drawing.magnitudes_svg(record.sources)
    return (f'<section id="magnitudes"><h2>How much each source changes</h2><figure>{svg}</figure></section>'
            if svg else "")


class HtmlReporter:
    filename = FILENAME

    def render(self, record: Record) -> str:
        return render(record)
