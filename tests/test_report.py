"""Views of a record: the HTML page (parsed, checked against the record, gold-filed, opened in a headless browser),
the drawings, the record's round trip through its store. Literal records: no TensorFlow unless named."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest

from opbisect import report
from opbisect.analysis import facts
from opbisect.errors import RecordError
from opbisect.ir.graph import OpGraph
from opbisect.record import store
from opbisect.record.model import (
    Facts,
    Finding,
    InstrumentedRuns,
    Magnitude,
    Meta,
    Record,
    Source,
    StepAnalysis,
    Trajectory,
)
from opbisect.report import csv, drawing, html, json_view, text

from conftest import NOISE_STEP, check_views, write_script

GOLD = Path(__file__).parent / "gold"
XHTML = "{http://www.w3.org/1999/xhtml}"
SVG = "{http://www.w3.org/2000/svg}svg"


def graph() -> OpGraph:
    """x -> noise (random) -> add -> w.assign (write) ; x -> mul -> add"""
    g = OpGraph()
    g.add_op("x", type="Placeholder", outputs=[("float32", "(4,)")])
    g.add_op("noise", type="RandomUniform", stateful=True, outputs=[("float32", "(4,)")],
             site="model_step.py:9 in step")
    g.add_op("mul", type="Mul", outputs=[("float32", "(4,)")])
    g.add_op("add", type="AddV2", outputs=[("float32", "(4,)")])
    g.add_op("assign", type="AssignSubVariableOp", stateful=True, resources=[(0, "w")], res_dtypes={"0": "float32"})
    g.add_data_edge("x", 0, "mul", 0)
    g.add_data_edge("mul", 0, "add", 0)
    g.add_data_edge("noise", 0, "add", 1)
    g.add_data_edge("add", 0, "assign", 1)
    return g


def literal_record(steps: int = 1) -> Record:
    g = graph()
    runs = 3
    taps = ["x:0", "noise:0", "mul:0", "add:0", "assign:res0"]
    fps = [[1, 10 + r, 3, 20 + r, 30 + r] for r in range(runs)]
    default = Trajectory(batches=[[[1]] * steps for _ in range(runs)], outputs=[[[5]] * steps for _ in range(runs)],
                         after=[[{"w": 100 * k + r} for k in range(steps)] for r in range(runs)])
    ins = InstrumentedRuns(taps=taps, fps=fps, before=[{"w": 0}] * runs, after=[{"w": 30 + r} for r in range(runs)],
                           outputs=[[5]] * runs)
    analyses = [StepAnalysis(step=k + 1, instrumented=ins, differing=["noise:0", "add:0", "assign:res0"],
                             magnitudes={"noise": Magnitude(0.5, 1e6, 1.0, 4)}, magnitude_runs=runs)
                for k in range(steps)]
    source = Source(rank=1, op_name="noise", op_type="RandomUniform", kind="random", first_step=1, region="",
                    iteration=None, seen_across="runs",
                    runs_differing=2, runs=runs, distinct_values=3, downstream_differing=2, affects_result=True,
                    max_abs_diff=0.5, max_ulp_diff=1e6, frac_elements_differing=1.0,
                    source_location="model_step.py:9 in step", known_remedy="use tf.random.stateless_uniform",
                    observer_effect=False, position=g.position["noise"], tensors=["noise:0"])
    meta = Meta(script="model_step.py", script_path="/work/model_step.py", form="step", runs=runs, steps=steps,
                fingerprinter="farmhash64", fingerprint="farmhash", jit_compile=False, ops=len(g), variables=1,
                restored_variables=1, seconds=1.5, tf_version="2.21.0", keras_version="3.15.1", python="3.11.7",
                device="CPU", cuda="", cudnn="", gpu_name="", op_determinism=False)
    return Record(meta=meta, graph=g.to_json(), findings=[Finding("warning", "1 stateful random op <without> a seed")],
                  skipped={"resource": 1}, results=["assign:res0"], default=default, pinned=default, fit=None,
                  analyses=analyses, sources=[source],
                  facts=Facts(verdict=facts.verdict(default, None, None),
                              grappler=facts.grappler_choice(default, default),
                              observer=facts.observer_effect(default.at(1), ins)))


def parse(page: str) -> ET.Element:
    return ET.fromstring(page.split("\n", 1)[1])  # after the doctype


def by_id(root: ET.Element, ident: str) -> ET.Element | None:
    return next((e for e in root.iter() if e.get("id") == ident), None)


def test_html_page_shows_the_records_verdict_sources_and_one_drawing_per_source():
    record = literal_record()
    root = parse(html.render(record))
    verdict = by_id(root, "verdict")
    assert (verdict.get("data-verdict"), verdict.get("data-exit-code")) == ("nondeterministic", "1")
    rows = [tr for tr in by_id(root, "sources").iter(f"{XHTML}tr") if tr.get("data-op")]
    assert [(tr.get("data-op"), tr.get("data-rank"), tr.get("data-kind")) for tr in rows] == [("noise", "1", "random")]
    figures = [f for f in by_id(root, "neighbourhoods").iter(f"{XHTML}figure")]
    assert [f.get("data-op") for f in figures] == ["noise"] and all(list(f.iter(SVG)) for f in figures)
    assert by_id(root, "grappler").get("data-config") == record.facts.grappler.config
    assert by_id(root, "observer").get("data-effect") == record.facts.observer.effect
    assert by_id(root, "steps") is None  # one step: no plot
    # Self-contained: no script, no stylesheet or image fetched; links only to its sections and to the files of
    # its own report folder (no scheme, no absolute path, nothing above the folder)
    assert not [e for e in root.iter() if e.tag in (f"{XHTML}script", f"{XHTML}link", f"{XHTML}img")]
    hrefs = [v for e in root.iter() for k, v in e.attrib.items() if k.endswith("href")]
    assert "sources.csv" in hrefs and "#sources" in hrefs
    assert not [v for v in hrefs if ":" in v or v.startswith("/") or ".." in v]


def test_html_plots_the_differing_variables_per_step():
    root = parse(html.render(literal_record(steps=3)))
    assert len(list(by_id(root, "steps").iter(SVG))) == 1


def test_html_escapes_what_the_script_names():
    record = literal_record()
    record.sources[0] = dataclasses.replace(record.sources[0], known_remedy="a <b>bold</b> & claim")
    page = html.render(record)
    parse(page)  # still well-formed
    assert "<b>bold</b>" not in page and "&lt;b&gt;bold&lt;/b&gt; &amp; claim" in page


def _skeleton(page: str) -> str:
    """The page with each drawing replaced by a marker: the gold file does not depend on matplotlib's output."""
    return re.sub(r"<svg.*?</svg>", "<svg/>", page, flags=re.S)


def test_html_matches_its_gold_file():
    page = _skeleton(html.render(literal_record(steps=2)))
    gold = GOLD / "report.html"
    if os.environ.get("OPBISECT_UPDATE_GOLD"):
        gold.parent.mkdir(exist_ok=True)
        gold.write_text(page)
    assert page == gold.read_text(), "the HTML changed: look at it, then OPBISECT_UPDATE_GOLD=1 pytest ..."


@pytest.mark.parametrize("reporter", report.reporters(html=False), ids=lambda r: r.filename)
def test_each_view_of_a_record_matches_its_gold_file(reporter):
    """sources.csv, summary.txt and report.json of one literal record, as coverage.py's Reporters are tested: a change
    to what a user reads is a diff to look at (the page has its own gold file above)."""
    said = reporter.render(literal_record(steps=2))
    gold = GOLD / "views" / reporter.filename
    if os.environ.get("OPBISECT_UPDATE_GOLD"):
        gold.parent.mkdir(exist_ok=True)
        gold.write_text(said)
    assert said == gold.read_text(), f"{reporter.filename} changed: look at it, then OPBISECT_UPDATE_GOLD=1 pytest ..."


@pytest.mark.parametrize("op_type, kind, fixes", [("ResourceScatterAdd", "op", True), ("PyFunc", "op", False),
                                                   ("RandomUniform", "random", True)])
def test_the_answer_sends_to_fix_only_what_fix_can_apply(op_type, kind, fixes, monkeypatch):
    """A scatter has a patch and an unseeded random op a seed: `opbisect fix` is the next command. A numpy_function's
    own Python has neither: the answer is its remedy, not a fix that would end where it began."""
    from opbisect.patches.registry import PATCHES
    from opbisect.report import answer

    monkeypatch.delitem(PATCHES, "PyFunc", raising=False)  # test_rounds' planted patch, where it ran here

    record = literal_record()
    record.sources[0] = dataclasses.replace(record.sources[0], op_type=op_type, kind=kind,
                                            known_remedy="fix the Python function" if op_type == "PyFunc" else "")
    said = answer.answer(record)
    assert (said.next == "opbisect fix model_step.py") == fixes
    assert ("opbisect fix` replaces only these ops" in said.do) == (op_type == "ResourceScatterAdd")
    assert said.do == "fix the Python function" or op_type != "PyFunc"


def test_the_next_command_stays_at_the_training_call_the_trace_analysed():
    """A trace of `--at fit:2` that names a scatter sends to the fix of that call, not of the first (whose answer
    would only send back here); a trace of the first call adds nothing."""
    from opbisect.report import answer

    record = literal_record()
    record.sources[0] = dataclasses.replace(record.sources[0], op_type="ResourceScatterSub", kind="op")
    assert answer.answer(record).next == "opbisect fix model_step.py"
    record.meta.intercepted = {"kind": "fit", "at": "fit:2"}
    record.meta.script_args = ["--epochs", "2"]
    assert answer.answer(record).next == "opbisect fix model_step.py --at fit:2 -- --epochs 2"


def literal_fix():
    """A fix of two rounds (an init cause pinned by experiment, then a race patched) whose user's test agreed, and
    the verify behind its recommendation."""
    from opbisect.record.fixing import Fix, Recommendation, Round, UserTest
    from opbisect.record.verification import GLOBAL, PATCHED, PLAIN, Variant, Verification, decide

    variants = [Variant(name=PLAIN, how="as written", runs=5, distinct=5, step_ms=10.0, timed=20, ratio=1.0),
                Variant(name=PATCHED, how="the patch", runs=5, distinct=1, step_ms=10.4, timed=20, ratio=1.04,
                        ratio_low=1.01, ratio_high=1.08, max_abs_diff=2e-7, max_ulp=3, patched=True),
                Variant(name=GLOBAL, how="enable_op_determinism", runs=5, distinct=1, step_ms=31.0, timed=20,
                        ratio=3.1, ratio_low=2.9, ratio_high=3.3, max_abs_diff=2e-7, max_ulp=3)]
    verification = Verification(script="train.py", script_path="/w/train.py", device="CPU", patch="patch.csv",
                                runs=5, replaced=["embedding/ResourceScatterAdd"], skipped={}, renamed={},
                                not_ops={}, plain_spread=0.02, variants=variants, recommendation=decide(variants))
    rounds = [Round(1, 1, [], [], ["init: dense/kernel", "embedding/ResourceScatterAdd"],
                    ["init: dense/kernel", "embedding/ResourceScatterAdd"], 12.5, "round1/train", runs=5,
                    cause=["python"], kept=True),
              Round(2, 0, [], ["embedding/ResourceScatterAdd"], [], [], 9.0, "round2/train", runs=5, seed="7")]
    test = UserTest(command="opbisect run --patch patch.csv --seed 7 train.py", steps=10, ran=[10, 10], agreed=True,
                    final=["ab12", "ab12"])
    fix = Fix(script="train.py", script_path="/w/train.py", form="fit", rounds=rounds, stopped="REPRODUCIBLE",
              why="the script is bitwise reproducible with everything found applied", switches=[], verify="verify",
              recommendation=Recommendation(variant=PATCHED, patch="patch.csv", seed="7", ratio=1.04),
              lines=["keras.utils.set_random_seed(7)"], test=test,
              checked_on={"tensorflow": "2.21.0", "device": "CPU"})
    return fix, verification


@pytest.mark.parametrize("view", ["fix", "verify"])
def test_fix_and_verify_summaries_match_their_gold_files(view):
    from opbisect.report import fix_view, verify_view

    fix, verification = literal_fix()
    said = "\n".join(fix_view.lines(fix) if view == "fix" else verify_view.lines(verification)) + "\n"
    gold = GOLD / "views" / f"{view}_summary.txt"
    if os.environ.get("OPBISECT_UPDATE_GOLD"):
        gold.write_text(said)
    assert said == gold.read_text(), f"{view}'s summary changed: look at it, then OPBISECT_UPDATE_GOLD=1 pytest ..."


@pytest.mark.parametrize("calls, apart_call, next_at", [
    (["fit:1", "fit:2"], "fit:2", "fit:2"),  # parted in the fine-tuning phase, which the fix never traced
    (["fit:1", "fit:2"], "fit:1", None),  # in the step it analysed: no other fix to run
    (["step:train_a", "step:train_b"], "step:train_b", "step:train_b"),
    ([], "", None),  # the target contract's probe: one step
])
def test_a_users_test_that_parts_in_a_step_the_fix_did_not_trace_says_which_fix_to_run(calls, apart_call, next_at):
    import dataclasses
    import shlex

    from opbisect.report import fix_view

    fix, _ = literal_fix()
    fix = dataclasses.replace(fix, script_args=["--epochs", "2"], out="runs/first", test=dataclasses.replace(
        fix.test, agreed=False, first_apart=9, apart=["base/embeddings"], calls=calls, apart_call=apart_call))
    said = fix_view.answer(fix)
    nexts = [shlex.split(line.split("next:")[1].split("   (")[0]) for line in said if line.startswith("  next:")]
    assert "exit 1" in said[0] and len(nexts) == (next_at is not None)
    if next_at:
        command = nexts[0]
        assert command[:3] == ["opbisect", "fix", "train.py"] and command[command.index("--at") + 1] == next_at
        # beside the first fix (one --out holds one fix)
        assert command[command.index("--out") + 1] == f"runs/first/at-{next_at.replace(':', '-')}"
        assert command[-3:] == ["--", "--epochs", "2"]


@pytest.mark.parametrize("calls, apart_call, next_words", [
    (["fit:1", "fit:2"], "fit:2", ["--at", "fit:2"]),  # a later training call: trace that one
    (["fit:1"], "fit:1", ["--steps", "9", "--runs", "12"]),  # the call analysed, past its step: a longer trace
    (["step:train_a", "step:train_b"], "step:train_b", ["--at", "step:train_b"]),
])
def test_a_deterministic_step_whose_script_runs_part_is_exit_1_with_where_to_look(calls, apart_call, next_words):
    """trace's exit 0 must hold for the user's two runs: where the script's two more runs part, the verdict is 1 and
    the answer says where, in every view, with the next command."""
    import shlex

    from opbisect.analysis import facts as decided
    from opbisect.execute.fresh import merged
    from opbisect.record.model import FreshCheck, UserTest
    from opbisect.report import answer, json_view, text

    record = literal_record()
    record = dataclasses.replace(record, sources=[], facts=dataclasses.replace(
        record.facts, verdict=decided.Verdict(nondeterministic=False, exit_code=0, evidence=[], rate_bound=0.63)))
    runs = UserTest(command="opbisect run --steps 10 model_step.py", steps=10, ran=[10, 10], agreed=False,
                    first_apart=9, apart=["w"], calls=calls, apart_call=apart_call)
    checked = merged(record, FreshCheck(hash_seed="unset", init=[], batches=[], first_differing_step=None, steps=1,
                                        script=runs))
    said = answer.answer(checked)
    assert (said.exit_code, checked.facts.verdict.exit_code) == (1, 1)
    assert shlex.split(said.next)[:3] == ["opbisect", "trace", "model_step.py"] and shlex.split(said.next)[3:] == \
        next_words
    assert any("apart after step 9" in line for line in text.lines(checked))
    assert json_view.summary(checked)["fresh"]["script"]["apart_call"] == apart_call  # for a script reading it
    agreed = merged(record, FreshCheck(hash_seed="unset", init=[], batches=[], first_differing_step=None, steps=1,
                                       script=dataclasses.replace(runs, agreed=True, first_apart=None, apart=[])))
    assert answer.answer(agreed).exit_code == 0 and agreed.facts.verdict.exit_code == 0


def test_the_summary_counts_the_derived_outputs_apart_from_the_ignored_ones():
    # Element-wise outputs are not tapped but derived from what feeds them: the summary must not call them skipped.
    record = dataclasses.replace(literal_record(), skipped={"element-wise": 7, "resource": 1, "string": 2})
    line = next(x for x in text.lines(record) if "tensors tapped" in x)
    derived = re.search(r"(\d+) tensors tapped and (\d+) element-wise outputs derived from them \((.*) skipped\)", line)
    assert derived and derived.groups() == (str(len(record.analyses[0].instrumented.taps)), "7", "resource 1, string 2")


def test_drawings_are_reproducible_svg():
    record = literal_record()
    graph = OpGraph.from_json(record.graph)
    one = drawing.neighbourhood_svg(graph, record.sources[0], {"noise:0", "add:0"})
    assert one.startswith("<svg") and one == drawing.neighbourhood_svg(graph, record.sources[0], {"noise:0", "add:0"})


def test_neighbourhood_marks_identical_inputs_the_source_and_what_follows():
    g = graph()
    g.add_resource_edges()
    n = drawing.neighbourhood(g, "add", differing={"add:0", "assign:res0"})
    roles = {node: (d["layer"], d["role"]) for node, d in n.nodes(data=True)}
    assert roles == {"mul": (0, "input"), "noise": (0, "input"), "add": (1, "source"), "assign": (2, "differing")}
    write = drawing.neighbourhood(g, "assign", differing={"assign:res0"})
    assert ("w (after AssignSubVariableOp)", {"layer": 2, "role": "differing", "state": True}) in \
        list(write.nodes(data=True))


def test_views_agree_with_the_record():
    record = literal_record()
    frame = pd.read_csv(pd.io.common.StringIO(csv.CsvReporter().render(record)))
    assert list(frame["op_name"]) == [s.op_name for s in record.sources]
    assert "position" not in frame.columns and "observer_effect" in frame.columns
    summary = json_view.summary(record)
    assert summary["verdict"]["exit_code"] == 1 and summary["sources"][0]["op_name"] == "noise"
    assert "noise is the first bad op" in text.lines(record)


def test_record_round_trips_through_its_store_and_bad_records_are_refused():
    record = literal_record(steps=2)
    again = store.from_json(store.to_json(record))
    assert again == record and OpGraph.from_json(again.graph).ops == OpGraph.from_json(record.graph).ops
    data = store.to_json(record)
    for broken, why in [(dict(data, analyses=[]), "no step analysis"), ({**data, "meta": 3}, "meta"),
                        (dict(data, version=2), "version")]:
        with pytest.raises(RecordError, match=why):
            store.from_json(broken)


@pytest.mark.browser
@pytest.mark.skipif(not shutil.which("chromium"), reason="no headless Chromium here (apt-get install chromium)")
def test_html_renders_in_a_headless_browser(tmp_path):
    page = tmp_path / "report.html"
    record = literal_record(steps=2)
    page.write_text(html.render(record))
    done = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    dom = done.stdout
    assert "<svg" in dom, done.stderr[-2000:]
    measured = [s for s in record.sources if s.max_abs_diff]
    assert measured  # the magnitudes plot is drawn
    # each neighbourhood, the steps plot and the magnitudes plot, as rendered
    assert dom.count("<svg") == len(record.sources) + 2
    assert 'data-verdict="nondeterministic"' in dom


def test_trace_html_writes_the_page_beside_the_csv(tmp_path):
    from conftest import trace

    script = write_script(tmp_path, "random_step", NOISE_STEP)
    t = trace(script, tmp_path / "reports", runs=3, html=True)
    root = parse((tmp_path / "reports" / "random_step" / "report.html").read_text())
    rows = [tr.get("data-op") for tr in by_id(root, "sources").iter(f"{XHTML}tr") if tr.get("data-op")]
    assert t.code == 1 and rows == list(t.csv["op_name"]) == ["noise/RandomUniform"]


def _with_sources(record, *sources):
    return dataclasses.replace(record, sources=[*record.sources, *sources])


def _like(s, **changes):
    return dataclasses.replace(s, **changes)


@pytest.mark.parametrize("shape", ["one source", "two steps", "a group and an observer effect",
                                   "a finding across processes"])
def test_every_view_of_a_record_says_the_same(tmp_path, shape):
    """conftest.check_views, which every traced test runs, on records the planted scripts do not make."""
    record = literal_record(steps=2 if shape == "two steps" else 1)
    s = record.sources[0]
    if shape == "a group and an observer effect":
        record = _with_sources(record, _like(s, rank=2, op_name="noise_1", distinct_values=2, runs_differing=1),
                               _like(s, rank=3, op_name="noise_2", observer_effect=True))
    if shape == "a finding across processes":
        record = _with_sources(record, _like(s, rank=2, op_name="w", op_type="VarHandleOp", kind="init",
                                             seen_across="processes", runs=2, distinct_values=2, runs_differing=1,
                                             known_remedy="call keras.utils.set_random_seed(7)"))
    folder = report.write(record, store.ReportFolder(tmp_path, "model_step").prepare(), html=True)
    check_views(folder, record, record.facts.verdict.exit_code)
    broken = (folder / "sources.csv").read_text().replace(",3,", ",4,", 1)  # one count changed in one view
    (folder / "sources.csv").write_text(broken)
    with pytest.raises(AssertionError):
        check_views(folder, record, record.facts.verdict.exit_code)
