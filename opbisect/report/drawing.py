"""Drawings for the HTML report, as SVG text, made with matplotlib (Agg; no display, no network).

- `neighbourhood()`: the ops around a source (pure, networkx): its input producers (identical in every run), the
  source, and the ops downstream up to `depth` edges away, each marked differing or identical.
- `neighbourhood_svg()`: that neighbourhood drawn in layers, left to right.
- `steps_svg()`: how many variables differ between runs after each step.
- `magnitudes_svg()`: how much each source's output differs between runs (the share of its elements, the ULPs).
SVG ids and metadata are fixed, so the same record always gives the same bytes.
"""

from __future__ import annotations

import io

import networkx as nx

from ..ir.graph import OpGraph
from ..ir.ids import state_id
from ..record.model import Record, Source

# role -> (fill, edge) colours; the legend reads the same table
ROLES = {
    "input": ("#d9f2d9", "#2e7d32"),  # identical in every run
    "source": ("#f8c9c4", "#c62828"),  # varies although its inputs did not
    "differing": ("#ffe0b2", "#ef6c00"),  # varies, following the source
    "identical": ("#eeeeee", "#9e9e9e"),  # downstream, yet identical in every run
}
MAX_PER_LAYER = 8


def neighbourhood(graph: OpGraph, op: str, differing: set[str], depth: int = 2) -> nx.DiGraph:
    """Nodes carry `layer` (0 inputs, 1 the source, 2.. downstream) and `role` (a key of ROLES)."""
    g = nx.DiGraph()
    g.add_node(op, layer=1, role="source")
    for slot, var in graph.written(op):  # a write has no output: the variable's state after it is what varies
        state = f"{var} (after {graph.op_type(op)})"
        g.add_node(state, layer=2, role="differing" if state_id(op, slot) in differing else "identical", state=True)
        g.add_edge(op, state)
    for producer in sorted({u for u, _ in graph.g.in_edges(op)})[:MAX_PER_LAYER]:
        g.add_node(producer, layer=0, role="input")
        g.add_edge(producer, op)
    frontier = [op]
    for layer in range(2, depth + 2):
        nxt = []
        for u in frontier:
            for v in sorted({v for _, v in graph.g.out_edges(u)}):
                if v in g:
                    continue
                if len(nxt) >= MAX_PER_LAYER:
                    break
                produced = graph.outputs(v) + graph.states(v)
                g.add_node(v, layer=layer, role="differing" if differing & set(produced) else "identical")
                g.add_edge(u, v)
                nxt.append(v)
        frontier = nxt
    return g


def _label(graph: OpGraph, op: str, state: bool = False) -> str:
    if state:  # a variable's state: "<variable> (after <write type>)"
        name, _, after = op.rpartition(" (")
        return f"{'/'.join(name.split('/')[-2:])}\nstate ({after}"
    short = "/".join(op.split("/")[-2:])
    if len(short) > 28:
        short = "…" + short[-27:]
    return f"{short}\n{graph.op_type(op)}"


def _svg(fig) -> str:
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "opbisect", "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML declaration and doctype: the SVG is inlined


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def neighbourhood_svg(graph: OpGraph, source: Source, differing: set[str]) -> str:
    plt = _pyplot()
    g = neighbourhood(graph, source.op_name, differing)
    pos = nx.multipartite_layout(g, subset_key="layer", align="vertical", scale=1.0)
    layers = max(d["layer"] for _, d in g.nodes(data=True)) + 1
    tallest = max(sum(1 for _, d in g.nodes(data=True) if d["layer"] == k) for k in range(layers))
    fig, ax = plt.subplots(figsize=(2.6 * layers, 0.9 * max(tallest, 2)))
    nx.draw_networkx_edges(g, pos, ax=ax, arrows=True, arrowstyle="-|>", edge_color="#757575", node_size=3000,
                           min_source_margin=30, min_target_margin=30)
    for node, d in g.nodes(data=True):
        fill, edge = ROLES[d["role"]]
        x, y = pos[node]
        ax.text(x, y, _label(graph, node, d.get("state", False)), ha="center", va="center", fontsize=7,
                fontfamily="DejaVu Sans",
                bbox={"boxstyle": "round,pad=0.4", "fc": fill, "ec": edge, "lw": 2 if d["role"] == "source" else 1})
    ax.set_axis_off()
    ax.margins(0.25, 0.25)
    return _svg(fig)


def steps_svg(record: Record) -> str | None:
    """Variables differing between runs after each step (None for a single step)."""
    if record.steps <= 1:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 2.6))
    steps = list(range(1, record.steps + 1))
    ax.plot(steps, record.default.differing_variables(), marker="o", label="uninstrumented step (opbisect's runs)")
    if record.fit is not None:
        ax.plot([record.fit.step_number(k) for k in range(1, record.fit.steps + 1)], record.fit.differing_variables(),
                marker="s", linestyle="--",
                label="model.fit itself")
    if record.processes is not None:
        ax.plot(steps[:len(record.processes.differing_variables)], record.processes.differing_variables,
                marker="^", linestyle=":", label="across processes")
    first = record.default.first_differing_step()
    if first:
        ax.axvline(first, color="#c62828", linewidth=1)
    ax.set_xlabel("step")
    ax.set_ylabel("variables differing")
    ax.set_xticks(steps)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    return _svg(fig)


def costs_svg(variants) -> str | None:
    """verify's variants (record/verification.Variant) as bars: each one's step time against the plain step's, its
    95% interval, green where its runs gave the same bits, red where they did not (None when none was timed)."""
    timed = [v for v in variants if v.ratio is not None and not v.reference]
    if not timed:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 0.45 * len(timed) + 1.0))
    ratios = [v.ratio for v in timed]
    below = [v.ratio - v.ratio_low if v.ratio_low is not None else 0.0 for v in timed]
    above = [v.ratio_high - v.ratio if v.ratio_high is not None else 0.0 for v in timed]
    colours = ["#2e7d32" if v.reproducible else "#c62828" for v in timed]
    rows = range(len(timed))
    ax.barh(rows, ratios, xerr=[below, above], color=colours, alpha=0.85, capsize=3)
    ax.axvline(1.0, color="#757575", linestyle="--", linewidth=1)
    ax.set_yticks(list(rows), [v.name for v in timed], fontsize=8)
    ax.invert_yaxis()
    if max(ratios) / max(min(ratios), 1e-9) > 20:  # a switch at 50x would flatten every other bar
        ax.set_xscale("log")
    ax.set_xlabel("step time against the plain step (x); green: bitwise reproducible, red: not")
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig)


def magnitudes_svg(sources: list[Source]) -> str | None:
    """Each measured source's share of differing elements as a bar, its largest ULP distance beside it (None where no
    source's magnitude was measured, or none differed in the magnitude pass's runs)."""
    measured = [s for s in sources if s.max_abs_diff and s.frac_elements_differing is not None][:20]
    if not measured:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 0.35 * len(measured) + 1.0))
    rows = range(len(measured))
    ax.barh(rows, [100 * s.frac_elements_differing for s in measured], color="#c62828", alpha=0.8)
    for row, s in zip(rows, measured):
        ax.text(100 * s.frac_elements_differing, row, f"  {s.max_ulp_diff:.3g} ulp", va="center", fontsize=7)
    ax.set_yticks(list(rows), [f"#{s.rank} {'/'.join(s.op_name.split('/')[-2:])}" for s in measured], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("elements of its output that differ between runs (%, log scale); the largest ULP distance beside")
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig)
