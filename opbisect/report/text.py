"""The terminal view (and summary.txt): a short human summary, read off the record."""

from __future__ import annotations

import textwrap
from pathlib import Path

from ..ir.optypes import KIND_REMEDIES
from ..record.model import DERIVED, Record, Runs, Source
from ..words import listed, printable, ruled_out
from . import answer

FILENAME = "summary.txt"
WIDTH = 120  # a remedy is wrapped to it (one was 560 characters on one line)

OBSERVER_LINES = {
    "none": "capture did not change the step's result",
    "changed_result": "capture changed the step's final result (grappler rewrote the instrumented graph "
                      "differently); any source named is the instrumented graph's",
    "hid": "capture hid the nondeterminism (observer effect: the taps changed how the step runs); confirm any fix "
           "on the uninstrumented step",
    "created": "capture created nondeterminism the plain step did not show (observer effect, or a race that did not "
               "fire in the plain runs: try more --runs)",
    "same_variables": "the plain and the instrumented step both vary, in the same variables",
    "moved": "the plain and the instrumented step both vary, in different variables (capture moved the race)",
    "inconclusive": "{seen}: inconclusive, so few runs could differ this much by chance (--max-runs looks harder)",
}


def observer_line(o) -> str:
    seen = (f"the difference showed in {o.plain_fired} of {o.plain_runs} plain runs and {o.instrumented_fired} of "
            f"{o.instrumented_runs} instrumented runs")
    return OBSERVER_LINES[o.effect].format(seen=seen)


def verdict_line(runs: Runs, label: str) -> str:
    n, d = len(runs.outputs), runs.distinct()
    if d <= 1:
        return f"{label}: {n} runs, 1 result: deterministic"
    vary = runs.varying_variables()
    shown = listed(vary)
    return f"{label}: {n} runs, {d} distinct results: NONDETERMINISTIC ({len(vary)} variables differ: {shown})" \
        if vary else f"{label}: {n} runs, {d} distinct results: NONDETERMINISTIC (outputs differ)"


def fit_lines(record: Record) -> list[str]:
    fit, replay = record.fit, record.facts.fit_replay
    if fit is None or replay is None:
        return []
    first = fit.first_differing_step()
    per = (f"{fit.step_number(fit.steps)} steps, seen after each of {fit.steps} executions (steps_per_execution)"
           if fit.steps_at and fit.step_number(fit.steps) != fit.steps else f"{fit.steps} steps")
    lines = [f"model.fit itself: {fit.runs} runs of {per}: "
             + (f"step {fit.step_number(first)} is the first differing step; variables differing after each: "
                f"{', '.join(map(str, fit.differing_variables()))}" if first else "every run ends identically")]
    if replay.checked_steps == 0:
        return lines + ["note: the replay cannot be checked against model.fit: both differ from step 1"]
    lines.append(f"opbisect's replay of fit's steps matches model.fit bit for bit through step {replay.checked_steps} "
                 f"(metric variables aside)" if replay.mismatch_step is None else
                 f"note: opbisect's replay of fit's steps leaves other weights than model.fit from step "
                 f"{replay.mismatch_step} (fit's own tf.function, callbacks, or data order): the op analysis is of "
                 f"the replay")
    return lines


def replica_lines(record: Record) -> list[str]:
    d = record.facts.replica_divergence
    if d is None:
        return []
    shown = listed(d.variables)
    return [f"warning: replica divergence: after step {d.step} the replicas' copies of {len(d.variables)} mirrored "
            f"variable(s) disagree ({shown}), in {d.runs} of {record.default.runs} runs: an update ran differently, "
            f"or only, in some replicas (a write to one copy, or a per-replica value assigned without aggregation)"]


def step_lines(record: Record) -> list[str]:
    t = record.default
    if t.steps <= 1:
        return []
    first = t.first_differing_step()
    growth = ", ".join(str(n) for n in t.differing_variables())
    lines = [f"steps: {t.steps} per run; " + (f"step {first} is the first differing step" if first else
                                               "no step differs") + f"; variables differing after each step: {growth}"]
    batches = t.differing_batches()
    if batches:
        lines.append(f"input: the batch of step {batches[0]} differs between runs (re-created iterators give "
                     f"different data{': steps ' + ', '.join(map(str, batches[:8])) if len(batches) > 1 else ''}); "
                     f"make the pipeline deterministic (tf.data deterministic=True, seeded shuffles)")
    return lines


def process_lines(record: Record) -> list[str]:
    p = record.processes
    if p is None:
        return []
    head = f"across {p.processes} processes (PYTHONHASHSEED {', '.join(p.hash_seeds)}): "
    if not p.differs:
        hidden = [] if p.pinned_first_differing_step is None else [
            f"note: with grappler pinned the processes differ from step {p.pinned_first_differing_step}: under "
            f"your config a grappler rewrite makes them agree, so a change of grappler's decisions would show it"]
        return [head + "the first run of every process ends identically"] + hidden
    k = p.first_differing_step
    total = len(record.default.after[0][0])
    return [head + f"{p.differing_variables[k - 1]} of {total} variables differ after step {k}"
            + (f" (the first differing step; compared op by op through step {p.compared_steps})"
               if record.steps > 1 else "")]


def ladder_lines(record: Record) -> list[str]:
    ladder = record.ladder
    if ladder is None:
        return []
    out = ["replica ladder (--replicas; each rung a fresh process, its verdict the uninstrumented step's):"]
    for r in ladder.rungs:
        out.append(f"  {r.label}: {r.replicas} replica(s), {r.runs} runs, {r.distinct} distinct result(s): "
                   f"{'NONDETERMINISTIC' if r.nondeterministic else 'deterministic'}"
                   + (f"; {len(r.sources)} source(s), first {r.sources[0]}" if r.sources else ""))
    out.append(f"ladder: {ladder.conclusion.replace('_', ' ')}: {ladder.reason}")
    if ladder.nccl:
        out.append(f"ladder: {ladder.nccl}")
    out.append(f"the analysis below is the rung {ladder.analysed}")
    return out


def seeded_lines(record: Record) -> list[str]:
    """The seeded stateful random ops: no sources (each run started them as a fresh process does), but their place in
    the sequence is in no checkpoint: a finding outside the verdict."""
    draws = record.seeded
    if not draws:
        return []
    by_cache = [d.op_name for d in draws if d.restart == "kernel cache"]
    out = [f"seeded random ops: {len(draws)} stateful random op(s) with a seed draw the same sequence in every fresh "
           f"process; each run started them there, so they are no sources"
           + (f" ({len(by_cache)} by clearing TensorFlow's kernel cache before every run: {listed(by_cache)})"
              if by_cache else ""),
           f"checkpoint: their place in that sequence is in no checkpoint: training resumed from one draws from the "
           f"sequence's start again; {KIND_REMEDIES['checkpoint']}"]
    out += [f"  {d.op_name} ({d.op_type})" + (f" at {d.site}" if d.site else "") for d in draws[:8]]
    if len(draws) > 8:
        out.append(f"  ... and {len(draws) - 8} more (report.json)")
    return out


def source_lines(record: Record, s: Source, also: list[Source] = ()) -> list[str]:
    """A source's lines; `also`: the other sources of its group (one kind, one op type, one remedy)."""
    if s.seen_across == "processes" and s.kind in ("init", "input"):
        return _fresh_lines(s, list(also))
    where = f"step {s.first_step}, " if record.steps > 1 else ""
    across = s.seen_across == "processes"
    count = f" (and {len(also)} more: {listed([x.op_name for x in also], 6)})" if also else ""
    lines = [f"  #{s.rank} {s.op_name} ({s.op_type}){count} kind={s.kind}{' across processes' if across else ''}: "
             f"{where}{s.distinct_values} distinct values in {s.runs} {'processes' if across else 'runs'} "
             f"({s.runs_differing} off the common one), {s.downstream_differing} differing ops after it"
             f"{'' if s.affects_result else ', does not reach the result'}{_magnitude(s)}"]
    if s.region:
        at = "" if s.iteration is None else f", first at iteration {s.iteration} of its loop"
        lines.append(f"     inside {s.region}{at}")
    if s.source_location:
        lines.append(f"     at {s.source_location}")
    placed = _placement(s)
    if placed:
        lines.append(f"     in {placed}")
    lines += _wrapped("remedy", s.known_remedy)
    alone = replay_line(s)
    if alone:
        lines.append(f"     alone: {alone}")
    return lines


def _magnitude(s: Source) -> str:
    if s.max_abs_diff is None:
        return ""
    if s.max_abs_diff == 0:  # it differed in the analysis' runs, not in the magnitude pass's own
        return "; the magnitude pass's runs happened to agree on it (no size measured)"
    return (f"; max |diff| {s.max_abs_diff:.3g}, {s.max_ulp_diff:.3g} ulp, {100 * s.frac_elements_differing:.3g}% of "
            f"elements")


def _wrapped(label: str, text: str) -> list[str]:
    return textwrap.wrap(f"{label}: {text}", WIDTH, initial_indent="     ", subsequent_indent="       ",
                         break_on_hyphens=False) if text else []


def _fresh_lines(s: Source, also: list[Source]) -> list[str]:
    """A finding of the fresh-process check: variables at the training call, or a batch, that differ between two
    fresh processes of the script."""
    group = [s, *also]
    if s.kind == "init":
        head = (f"  #{s.rank} init: {len(group)} variable(s) have other values at the training call in two fresh "
                f"processes: {listed([x.op_name for x in group], 6)}")
        sites = sorted({x.source_location for x in group if x.source_location})
        makers = [f"{x.op_name} by {x.detail}" for x in group if x.detail]
        made = [f"     made at {', '.join(sites)}" + (f": {'; '.join(makers[:4])}" if makers else "")] if sites or \
            makers else []
    else:
        head = (f"  #{s.rank} input: the batch of step {s.first_step} differs between two fresh processes"
                + (f" (and of {len(also)} more step(s))" if also else ""))
        made = [f"     {s.detail}"] if s.detail else []
    return [head] + made + _wrapped("remedy", s.known_remedy)


def _placement(s: Source) -> str:
    """Under tf.distribute: 'worker 1, replica 0, on GPU:0' (what is known of it); "" elsewhere."""
    if s.worker is None and s.replica is None:
        return ""
    parts = [f"worker {s.worker}" if s.worker is not None else "", f"replica {s.replica}" if s.replica is not None
             else "", f"on {s.device}" if s.device else ""]
    return ", ".join(p for p in parts if p)


def replay_line(s: Source) -> str:
    """What the source did when run alone on its recorded inputs, and where its reproducer is."""
    if s.replay_runs:
        said = (f"{s.replay_distinct} distinct results in {s.replay_runs} runs: confirmed alone"
                if s.replay_distinct > 1 else
                f"1 result in {s.replay_runs} runs: did not vary alone (the variation needs its context: concurrency "
                f"with other ops, memory layout, a neighbour)")
    else:
        said = ""
    parts = [p for p in (said, s.replay_note, f"reproducer {s.reproducer}" if s.reproducer else "") if p]
    return "; ".join(parts)


def answer_lines(record: Record) -> list[str]:
    """The first lines: the verdict, what differs, what to do, the next command."""
    a = answer.answer(record)
    out = [f"opbisect: {record.meta.script}: {a.verdict} (exit {a.exit_code})", f"  {a.what}"]
    out += textwrap.wrap(f"do: {a.do}", WIDTH, initial_indent="  ", subsequent_indent="    ",
                         break_on_hyphens=False) if a.do else []
    return out + ([f"  next: {a.next}"] if a.next else [])


def fresh_lines(record: Record) -> list[str]:
    """The fresh-process check, as evidence."""
    f = record.fresh
    if f is None:
        return []
    head = f"two fresh processes of the script (PYTHONHASHSEED {f.hash_seed}), at the training call: "
    if f.error:
        return [f"note: {head}no second process to compare: {f.error}"]
    said = (f"{len(f.init)} variable(s) differ" if f.init else f"the batch of step {f.batches[0]} differs"
            if f.batches else f"alike, then apart after step {f.first_differing_step}" if f.first_differing_step
            else f"every variable and batch alike, and the step's results through step {f.steps}")
    cause = ""
    if f.cause is not None:
        tried = "; ".join(f"{'+'.join(t)}: {'agree' if ok else 'differ'}" for t, ok in zip(f.cause.tried,
                                                                                          f.cause.agreed))
        cause = f"; the cause, by experiment (pairs of fresh processes, sources pinned: {tried})"
    return [head + said + cause] + script_lines(f.script)


def script_lines(t) -> list[str]:
    """The script's two more fresh runs, where the step came out deterministic (the user's test past the call)."""
    if t is None:
        return []
    head = f"two more fresh runs of the script ({t.command}): "
    if t.error:
        return [f"note: {head}could not compare: {t.error}"]
    calls = f" ({', '.join(t.calls)})" if t.calls else ""
    if t.agreed:
        return [f"{head}every variable alike after each of {t.ran[0]} training steps{calls} "
                f"({ruled_out(t.rate_bound, 'steps')})"]
    at = f"after step {t.first_apart}" + (f" in {t.apart_call}" if t.apart_call else "")
    apart = f"{at} ({len(t.apart)} variable(s): {listed(t.apart)})" if t.first_apart is not None else \
        f"after {' and '.join(map(str, t.ran))} steps"
    return [f"{head}apart {apart}"]


def lines(record: Record, folder: Path | None = None) -> list[str]:
    m, f = record.meta, record.facts
    out = answer_lines(record) + sources_lines(record)
    out.append(f"how it was found: {m.form} form, {record.runs} runs on {m.device} (TF {m.tf_version}, "
               f"{m.fingerprinter})")
    if m.looked_harder:
        out.append(f"note: {m.looked_harder} after the first runs: every pass ran again with {m.runs} runs "
                   f"(--max-runs)")
    out += fresh_lines(record)
    out.append(verdict_line(record.default.final(), "the step as you run it (uninstrumented, your grappler config), "
                                                    "from one restored state"))
    if record.pinned:
        out.append(verdict_line(record.pinned.final(), "the same with grappler's rewrites pinned"))
    if (f.grappler.config == "default" and record.pinned) or (f.grappler.config == "pinned" and not record.pinned):
        out.append(f"note: {f.grappler.reason}")
    out += fit_lines(record) + step_lines(record) + replica_lines(record)
    first = record.analyses[0]
    skipped = ", ".join(f"{k} {v}" for k, v in sorted(record.skipped.items()) if k not in DERIVED)
    derived = sum(v for k, v in record.skipped.items() if k in DERIVED)
    differing = sum(len(a.differing) for a in record.analyses)
    out.append(f"the step with its tensors fingerprinted (instrumented, {f.grappler.config} grappler): "
               f"{len(first.instrumented.taps)} tensors tapped"
               f"{f' and {derived} element-wise outputs derived from them' if derived else ''}"
               f"{f' ({skipped} skipped)' if skipped else ''}, "
               f"{len(first.differing)} differ"
               f"{f' ({differing} over all {len(record.analyses)} steps)' if len(record.analyses) > 1 else ''}; "
               f"{observer_line(f.observer)}")
    out += [f"{x.level}: {x.message}" for x in record.findings]
    out += seeded_lines(record) + process_lines(record) + ladder_lines(record)
    out += _verdict(record)
    if folder is not None:
        out.append(f"report: {folder}")
    return [printable(line) for line in out]


def sources_lines(record: Record) -> list[str]:
    if not record.sources:
        if record.facts.verdict.nondeterministic:
            return ["no source named: see how it was found, below"]
        bound = record.facts.verdict.rate_bound
        odds = f" {ruled_out(bound)}; " if bound is not None else " "
        return [f"no source found: nothing differed in {record.runs} runs;{odds}a race that fires more rarely can hide "
                f"(more --runs look harder)"]
    found = answer.groups(record)
    mine = [g for g in found if not g.first.observer_effect]
    shown = [f"{len(record.sources)} source(s) in {len(found)} finding(s), ranked (what to fix first):"] if mine else []
    for g in mine:
        shown += source_lines(record, g.first, g.sources[1:])
    capture = [s for s in record.sources if s.observer_effect]
    if capture:
        shown.append(f"seen only with the tensors fingerprinted (observer effect, not sources of your step): "
                     f"{listed([s.op_name for s in capture], 6)}")
    return shown


def _verdict(record: Record) -> list[str]:
    v = record.facts.verdict
    if not v.nondeterministic:
        if any(s.observer_effect for s in record.sources):
            return ["verdict: deterministic, exit 0 (the sources above changed the result only in the instrumented "
                    "step: an observer effect, not a finding about your step)"]
        harmless = " (the sources above vary but do not reach the step's result)" if record.sources else ""
        confidence = "" if v.rate_bound is None else f"; confidence: {ruled_out(v.rate_bound)}"
        return [f"verdict: deterministic, exit 0{harmless}{confidence}"]
    top = record.sources[0] if record.sources else None
    first_bad = [f"{top.op_name} is the first bad op" + (f" (step {top.first_step})" if record.steps > 1 else "")
                 ] if top else []
    return first_bad + [f"verdict: nondeterministic, exit 1: {'; '.join(v.evidence)} (certain: differing results "
                        f"were seen)"]


class TextReporter:
    filename = FILENAME

    def render(self, record: Record) -> str:
        return "\n".join(lines(record)) + "\n"
