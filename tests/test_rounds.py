"""`opbisect fix`: every round automatic, then verify. Planted sources a patch fixes: two numpy_functions that add a
per-call count (different in every run), the second fed by the first, so the first hides the second; the script
registers a planted patch for their op type (the noise left out), as the patch library registers real ones."""

from __future__ import annotations

import json
from xml.etree import ElementTree

import pandas as pd

from opbisect.cli import main
from opbisect.tfcompat import installed_tensorflow

from conftest import NOISE_STEP, write_script

XHTML = {"x": "http://www.w3.org/1999/xhtml", "s": "http://www.w3.org/2000/svg"}

HIDDEN_BEHIND = """
from opbisect.patches.registry import PATCHES, register

if "PyFunc" not in PATCHES:
    @register("PyFunc", how="planted: the call without its noise")
    def _steady(ctx, x):
        return [tf.identity(x)]

calls = [0]


def noisy(x):
    calls[0] += 1
    return (x + np.float32(calls[0]) * np.float32(1e-3)).astype(np.float32)


w = tf.Variable(tf.ones([4]), name="w")


@tf.function
def step(x):
    first = tf.ensure_shape(tf.numpy_function(noisy, [x], tf.float32, name="first"), [4])
    second = tf.ensure_shape(tf.numpy_function(noisy, [first * 2.0], tf.float32, name="second"), [4])
    w.assign_add(second)
    return tf.reduce_sum(w)


inputs = (tf.ones([4]),)
"""


def _fix(script, out, *flags, progress=False) -> int:
    return main(["fix", str(script), "--runs", "3", "--verify-runs", "3", "--timing-runs", "5", "--out", str(out),
                 *flags, *([] if progress else ["--no-progress"])])


def test_fix_finds_what_a_source_hid_round_by_round_and_verifies_the_patch(tmp_path, capsys):
    script = write_script(tmp_path, "hidden", HIDDEN_BEHIND)
    assert _fix(script, tmp_path / "r", progress=True) == 0
    folder = tmp_path / "r" / "hidden-fix"
    fix = json.loads((folder / "fix.json").read_text())
    assert [(r["exit_code"], r["new"]) for r in fix["rounds"]] == [(1, ["first"]), (1, ["second"]), (0, [])]
    assert fix["rounds"][1]["patched"] == ["first"] and fix["rounds"][2]["patched"] == ["first", "second"]
    patch = pd.read_csv(folder / "patch.csv")
    assert list(zip(patch["round"], patch["op_name"])) == [(1, "first"), (2, "second")]
    assert fix["recommendation"]["variant"] == "patched" and fix["verify"] == "verify/hidden-verify"
    assert fix["checked_on"] == {"tensorflow": installed_tensorflow(), "device": "CPU"}  # run warns under another
    assert fix["recommendation"]["patch"] == str(folder / "patch.csv")
    assert any(str(folder / "patch.csv") in line for line in fix["lines"])
    # the user's test: two fresh processes of the step with the patch, compared after each step, agree
    assert fix["test"]["agreed"] and fix["test"]["error"] == "" and len(set(fix["test"]["final"])) == 1
    assert (folder / "round2" / "hidden" / "sources.csv").is_file()
    page = ElementTree.parse(folder / "report.html").getroot()  # the fix's page: the rounds, verify's costs
    rows = page.findall(".//x:tr[@data-round]", XHTML)
    assert [(int(r.get("data-round")), int(r.get("data-exit"))) for r in rows] == [(1, 1), (2, 1), (3, 0)]
    verified = json.loads((folder / fix["verify"] / "verification.json").read_text())
    # verify and the rounds ran inside the staged folder: what they wrote names the folder the fix ended in
    assert verified["patch"] == str(folder / "patch.csv")
    assert not [f for f in folder.rglob("*") if f.is_file() and b".partial" in f.read_bytes()]
    shown = {r.get("data-variant"): r.get("data-reproducible") for r in page.findall(".//x:tr[@data-variant]", XHTML)}
    assert shown == {v["name"]: str(v["runs"] >= 2 and v["distinct"] == 1 and not v["error"]).lower()
                     for v in verified["variants"]}
    # while verify ran, the fix said each variant as it finished, before the user's test: its runs, as recorded
    said = capsys.readouterr().out.splitlines()
    test_at = next(k for k, line in enumerate(said) if line.startswith("the user's test:"))
    told = {line.split(":")[0].strip(): line for line in said[:test_at] if line.startswith("  ") and ": " in line}
    for v in verified["variants"]:
        if not v["error"] and not v["reference"]:
            assert f" in {v['runs']} runs" in told[v["name"]]
    assert page.find(".//x:figure/s:svg", XHTML) is not None  # the cost plot
    # the fix's patch.csv (or its folder) is what --patch takes
    assert main(["verify", str(script), "--patch", str(folder), "--runs", "3", "--timing-runs", "0",
                 "--no-switches", "--out", str(tmp_path / "v")]) == 0


SEEN_LATE = HIDDEN_BEHIND.replace("calls = [0]", "calls = [0]\nVARY_ON = {2} | set(range(20, 10**6))").replace(
    "np.float32(calls[0]) * np.float32(1e-3)", "np.float32(calls[0] if calls[0] in VARY_ON else 0)").replace(
    "second = tf.ensure_shape(tf.numpy_function(noisy, [first * 2.0], tf.float32, name=\"second\"), [4])",
    "second = first * 2.0")


def test_a_round_whose_step_varies_but_names_nothing_looks_harder_and_the_fix_goes_on(tmp_path):
    """Round 1's first passes (calls 1-9 of a fresh process: plain, instrumented, pinned) see the planted op vary
    once in the plain runs and never in capture's: inconclusive, no op named. The round looks harder (4 x --runs,
    calls 10 on, varying from call 20): it names the op; round 2 patches it and is reproducible."""
    script = write_script(tmp_path, "late", SEEN_LATE)
    assert _fix(script, tmp_path / "r") == 0
    fix = json.loads((tmp_path / "r" / "late-fix" / "fix.json").read_text())
    assert [(r["exit_code"], r["runs"], r["new"]) for r in fix["rounds"]] == [(1, 12, ["first"]), (0, 12, [])]
    round1 = json.loads((tmp_path / "r" / "late-fix" / "round1" / "late" / "report.json").read_text())
    assert round1["runs"] == 12 and [s["op_name"] for s in round1["sources"]] == ["first"]
    assert fix["recommendation"]["variant"] == "patched" and fix["test"]["agreed"]


def test_fix_max_runs_no_more_than_runs_is_a_usage_error(tmp_path):
    script = write_script(tmp_path, "late", SEEN_LATE)
    assert _fix(script, tmp_path / "r", "--max-runs", "3") == 128
    assert not (tmp_path / "r" / "late-fix").exists()


def test_fix_of_a_reproducible_step_needs_one_round_and_no_verify(tmp_path):
    script = write_script(tmp_path, "steady", HIDDEN_BEHIND.replace("np.float32(calls[0])", "np.float32(0)"))
    assert _fix(script, tmp_path / "r") == 0
    fix = json.loads((tmp_path / "r" / "steady-fix" / "fix.json").read_text())
    assert len(fix["rounds"]) == 1 and fix["recommendation"]["variant"] == "as written" and fix["verify"] == ""
    assert fix["test"]["agreed"]
    page = ElementTree.parse(tmp_path / "r" / "steady-fix" / "report.html").getroot()
    assert page.find(".//x:p[@data-verdict]", XHTML).get("data-exit") == "0"
    assert page.findall(".//x:tr[@data-variant]", XHTML) == []  # no verify ran: no variants shown


def test_a_source_a_seed_fixes_gets_the_seed_and_the_users_test_agrees(tmp_path):
    script = write_script(tmp_path, "noise", NOISE_STEP)  # an unseeded random op: its remedy is a seed
    assert _fix(script, tmp_path / "r") == 0
    fix = json.loads((tmp_path / "r" / "noise-fix" / "fix.json").read_text())
    assert [(r["exit_code"], r["seed"]) for r in fix["rounds"]] == [(1, ""), (0, "7")]
    assert fix["recommendation"] == {"variant": "seeded", "patch": "", "seed": "7", "env": {}, "ratio": None, "at": "",
                                     "unlike_plain": False}
    assert fix["test"]["agreed"] and fix["verify"] == ""
    assert not (tmp_path / "r" / "noise-fix" / "patch.csv").exists()  # nothing to patch: no patch file


def test_a_source_no_patch_and_no_seed_fixes_stops_the_fix_with_exit_1(tmp_path, monkeypatch):
    from opbisect.patches.registry import PATCHES

    monkeypatch.delitem(PATCHES, "PyFunc", raising=False)  # HIDDEN_BEHIND's planted patch, where it ran here
    # a numpy_function's own Python draws anew in every run: no patch replaces it, no seed reaches it
    script = write_script(tmp_path, "drift", NOISE_STEP.replace("tf.random.uniform([4], name=\"noise\")",
                                                                 "tf.numpy_function(lambda: np.random.default_rng()"
                                                                 ".random(4, np.float32), [], tf.float32)"))
    assert _fix(script, tmp_path / "r") == 1
    fix = json.loads((tmp_path / "r" / "drift-fix" / "fix.json").read_text())
    # round 2 tried the patch and nothing could replace the op: the stop names it and its own remedy
    assert (fix["stopped"], fix["recommendation"]) == ("NO_REMEDY", None)
    assert fix["rounds"][1]["patched"] == [] and fix["rounds"][1]["sources"] == fix["rounds"][0]["sources"]
    assert "fix the Python function" in fix["why"]
    assert fix["test"] is None


def test_a_source_only_a_family_switch_fixes_runs_the_later_rounds_and_the_lines_under_it(monkeypatch):
    from opbisect.fix.plan import RoundPlan, family_switches, keep_lines
    from opbisect.record.fixing import Recommendation

    def source(op_type):
        return type("S", (), {"op_type": op_type})()

    round1 = family_switches(RoundPlan(1), [source("SparseSoftmaxCrossEntropyWithLogits")])
    round2 = family_switches(RoundPlan(2, switches=round1), [source("BiasAddGrad"), source("MaxPoolGrad")])
    assert (round1, round2) == ((), ("TF_CUDNN_DETERMINISTIC",))  # ResNet50's rounds 1 and 2 on the H200
    csv = "/r/resnet50-fix/patch.csv"
    rec = Recommendation("patched + TF_CUDNN_DETERMINISTIC=1", patch=csv, env={"TF_CUDNN_DETERMINISTIC": "1"})
    assert keep_lines(rec, "fit") == [
        'os.environ["TF_CUDNN_DETERMINISTIC"] = "1"  # before TensorFlow is imported', "import opbisect",
        f'model = opbisect.deterministic(model, "{csv}")  # after model is built, before training']
    assert rec.command("train.py", ["--epochs", "2"]) == \
        f"TF_CUDNN_DETERMINISTIC=1 opbisect run --patch {csv} train.py -- --epochs 2"
    assert keep_lines(Recommendation("global switch", env={"TF_DETERMINISTIC_OPS": "1"}), "step") == [
        "tf.config.experimental.enable_op_determinism()  # before the model is built"]


def test_the_users_two_runs_side_by_side_each_take_gpu_memory_as_they_need_it(tmp_path, monkeypatch):
    """On the H200 the two runs of the user's test ran side by side, each TensorFlow took the whole GPU, and the
    second ran out of memory: each child takes memory as it needs it (unless the user set it otherwise)."""
    from opbisect.execute import children
    from opbisect.execute.usertest import UserTestRuns
    from opbisect.settings import FixSettings

    started = []
    monkeypatch.setattr(children, "start", lambda cmd, env, **kw: started.append(env) or None)
    monkeypatch.delenv("TF_FORCE_GPU_ALLOW_GROWTH", raising=False)
    settings = FixSettings(script=write_script(tmp_path, "s", NOISE_STEP))
    UserTestRuns.started(settings, tmp_path, True, seed="7", env={"PYTHONHASHSEED": "7"})
    assert len(started) == 2 and all(env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true" and env["PYTHONHASHSEED"] == "7"
                                     for env in started)


def test_a_variant_two_fresh_runs_refute_gives_way_to_the_next_and_the_answer_says_so(tmp_path, monkeypatch):
    """verify's runs are one process's: a choice made once per process (XLA's autotuned kernels) can pass them and
    still part two fresh runs. The fix tries its reproducible variants cheapest first until the user's test agrees,
    and says which it passed over; where none agrees, exit 1 on the last."""
    from opbisect.fix.driver import FixDriver
    from opbisect.record.fixing import Fix, Recommendation, UserTest
    from opbisect.report import fix_html
    from opbisect.report.fix_view import answer
    from opbisect.settings import FixSettings

    recs = [Recommendation("patched + XLA_FLAGS=--x", patch="p.csv", env={"XLA_FLAGS": "--x"}, ratio=1.01),
            Recommendation("global switch", env={"TF_DETERMINISTIC_OPS": "1"}, ratio=3.2)]
    driver = FixDriver(FixSettings(script=write_script(tmp_path, "s", NOISE_STEP)), tmp_path, tmp_path)

    def users_test(agrees):
        tested = []

        def test(rec):
            tested.append(rec.variant)
            ok = agrees(rec)
            return UserTest(command="c", steps=10, ran=[10, 10], agreed=ok, first_apart=None if ok else 3,
                            apart=[] if ok else ["dense/kernel"])
        return test, tested

    test, tested = users_test(lambda rec: "XLA_FLAGS" not in rec.env)
    monkeypatch.setattr(driver, "user_test", test)
    rec, got, refuted = driver.tried_in_turn(recs)
    assert (rec, got.agreed, tested) == (recs[1], True, [recs[0].variant, recs[1].variant])
    assert [(r.recommendation, r.test.first_apart) for r in refuted] == [(recs[0], 3)]
    fix = Fix(script="s.py", script_path="/s.py", form="fit", rounds=[], stopped="NAMED_NOTHING", why="", switches=[],
              recommendation=rec, test=got, refuted=refuted)
    said = answer(fix)
    assert fix.exit_code == 0 and "two fresh runs agree bit for bit through 10 training steps (" in said[0]
    # each step of each run is a trial: 20 steps without a difference rule out one that fires in over 14% of them
    assert round(got.rate_bound, 3) == 0.139 and f"{100 * got.rate_bound:.2g}% of steps" in said[0]
    assert said[2].startswith("  passed over: with opbisect's patch, XLA_FLAGS=--x (1.01x the plain step)")
    page = ElementTree.fromstring(fix_html.page(fix, None, said))
    assert [p.get("data-refuted") for p in page.findall(".//x:p[@data-refuted]", XHTML)] == [recs[0].variant]

    test, tested = users_test(lambda rec: False)
    monkeypatch.setattr(driver, "user_test", test)
    rec, got, refuted = driver.tried_in_turn(recs)
    assert (rec, got.agreed, len(tested), len(refuted)) == (recs[1], False, 2, 1)

    def parting_later(rec):  # the runs part in a training call the fix did not analyse: its fix is the next step
        return UserTest(command="c", steps=10, ran=[10, 10], agreed=False, first_apart=9, apart=["head/kernel"],
                        calls=["fit:1", "fit:2"], apart_call="fit:2")
    monkeypatch.setattr(driver, "user_test", parting_later)
    rec, got, refuted = driver.tried_in_turn(recs)
    assert (rec, got.apart_call, refuted) == (recs[0], "fit:2", [])
    assert driver.tried_in_turn([]) == (None, None, [])


def test_rounds_that_name_nothing_on_a_step_xla_compiles_on_a_gpu_say_where_to_look():
    from types import SimpleNamespace

    from opbisect.fix.plan import RoundPlan, Stop, decide

    def record(jit, device):
        meta = SimpleNamespace(runs=20, looked_harder="varied", jit_compile=jit, device=device)
        return SimpleNamespace(facts=SimpleNamespace(verdict=SimpleNamespace(nondeterministic=True)), sources=[],
                               meta=meta, fresh=None)

    said = {(jit, device): decide(RoundPlan(2, ops=("a",)), record(jit, device), 5)
            for jit in (True, False) for device in ("GPU (NVIDIA H100 80GB HBM3)", "CPU")}
    assert {d.stop for d in said.values()} == {Stop.NAMED_NOTHING} and all(d.plan is None for d in said.values())
    assert [k for k, d in said.items() if "XLA's switches" in d.why] == [(True, "GPU (NVIDIA H100 80GB HBM3)")]
