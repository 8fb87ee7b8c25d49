"""Decisions on literal fingerprint tables (no TensorFlow, no race that may fail to fire): the grappler choice,
the verdict and its exit code, the observer effect, the fit replay check, and the text view reading them."""

from __future__ import annotations

import pytest

from opbisect.analysis import facts
from opbisect.ir.ids import TensorRef, op_id, split_op_id
from opbisect.record.model import FitReplay, InstrumentedRuns, Rung, Runs, Trajectory


def trajectory(*runs: list[int], steps: int = 1) -> Trajectory:
    """Runs whose variable `w` ends with the given fingerprint after each step (one list per run)."""
    return Trajectory(batches=[[[7]] * steps for _ in runs], outputs=[[[1]] * steps for _ in runs],
                      after=[[{"w": v} for v in run] for run in runs])


SAME, VARIES = trajectory([5], [5], [5]), trajectory([5], [6], [5])


@pytest.mark.parametrize("default, pinned, config", [
    (SAME, SAME, "pinned"), (VARIES, VARIES, "pinned"),
    (VARIES, SAME, "default"),  # pinning hides it: a grappler rewrite causes it, analyse the user's config
    (SAME, VARIES, "default"),  # pinning creates it: the user's config is what the verdict is about
    (VARIES, None, "default"),  # --no-pin-grappler
])
def test_grappler_choice_analyses_pinned_only_when_pinning_does_not_change_the_verdict(default, pinned, config):
    choice = facts.grappler_choice(default, pinned)
    assert choice.config == config and choice.reason


def test_verdict_follows_the_uninstrumented_step_and_names_its_evidence():
    assert facts.verdict(SAME, None, None).exit_code == 0
    v = facts.verdict(VARIES, None, None)
    assert (v.nondeterministic, v.exit_code, len(v.evidence)) == (True, 1, 1)
    # model.fit itself varying counts, even where opbisect's replay does not vary
    assert facts.verdict(SAME, VARIES, None).exit_code == 1
    # a later step: the first differing step is what the evidence names
    later = trajectory([5, 8], [5, 9], steps=2)
    assert "after step 2" in facts.verdict(later, None, None).evidence[0]
    # batches that differ between runs are evidence by themselves
    batches = trajectory([5], [5])
    batches.batches = [[[1]], [[2]]]
    assert facts.verdict(batches, None, None).exit_code == 1


def instrumented(*finals: int) -> InstrumentedRuns:
    return InstrumentedRuns(taps=["a:0"], fps=[[0]] * len(finals), before=[{"w": 1}] * len(finals),
                            after=[{"w": f} for f in finals], outputs=[[1]] * len(finals))


@pytest.mark.parametrize("plain, inst, effect", [
    ([5, 5], [5, 5], "none"),
    ([5, 5], [4, 4], "changed_result"),  # both deterministic, different results: grappler rewrote the taps' graph
    ([1, 2, 3, 4, 5, 6], [4] * 6, "hid"),  # 5 of 6 runs off the common result against 0 of 6: p = 0.015
    ([5] * 6, [1, 2, 3, 4, 5, 6], "created"),
    ([5, 6], [4, 4], "inconclusive"),  # 1 of 2 against 0 of 2 happens by chance
    ([5, 5, 5], [4, 6, 7], "inconclusive"),
    ([5, 6], [4, 6], "same_variables"),
])
def test_observer_effect_compares_the_plain_and_the_instrumented_step(plain, inst, effect):
    runs = Runs(outputs=[[1]] * len(plain), after=[{"w": p} for p in plain])
    assert facts.observer_effect(runs, instrumented(*inst)).effect == effect


def test_chance_is_fishers_exact_test():
    assert facts.chance(3, 5, 0, 5) == pytest.approx(1 / 6)
    assert facts.chance(5, 5, 0, 5) == pytest.approx(2 / 252)
    assert facts.chance(2, 4, 2, 4) == pytest.approx(1.0)


def test_observer_effect_moved_when_other_variables_vary():
    plain = Runs(outputs=[[1], [1]], after=[{"w": 1, "v": 1}, {"w": 2, "v": 1}])
    inst = InstrumentedRuns(taps=[], fps=[[], []], before=[{}, {}], after=[{"w": 1, "v": 1}, {"w": 1, "v": 2}],
                            outputs=[[1], [1]])
    assert facts.observer_effect(plain, inst).effect == "moved"


def test_fit_replay_check_stops_where_either_side_starts_to_vary_and_ignores_metrics():
    def t(*runs):
        return Trajectory(outputs=[[[]] * len(r) for r in runs], after=list(runs))

    fit = t(*[[{"w": 1, "m": 9}, {"w": 2, "m": 9}, {"w": 3, "m": 9}]] * 2)
    replay = t(*[[{"w": 1, "m": 0}, {"w": 2, "m": 0}, {"w": 4, "m": 0}]] * 2)
    assert facts.fit_replay(fit, replay, ["m"]) == FitReplay(checked_steps=3, mismatch_step=3)
    varies = t([{"w": 1, "m": 0}, {"w": 5, "m": 0}], [{"w": 1, "m": 0}, {"w": 6, "m": 0}])
    assert facts.fit_replay(fit, varies, ["m"]).checked_steps == 1


@pytest.mark.parametrize("text", ["sgd/ResourceScatterSub:0", "a/b:res3", "while/body::add:1@7", "x:12@0",
                                  "while/body::scatter:pre0@2"])
def test_tensor_ids_round_trip_through_the_one_parser(text):
    ref = TensorRef.parse(text)
    assert str(ref) == text
    assert split_op_id(ref.op) == (ref.region, ref.op.rpartition("::")[2])


def test_tensor_ids_keep_their_parts():
    ref = TensorRef.parse("while/body::scatter:res1@4")
    assert (ref.region, ref.op, ref.port, ref.is_state, ref.iteration) == ("while/body", "while/body::scatter", 1,
                                                                         True, 4)
    assert op_id("add", "cond/then_branch") == "cond/then_branch::add"
    prior = TensorRef.parse("while/body::scatter:pre1@4")
    assert (prior.is_prior, prior.is_state, prior.port, prior.iteration) == (True, False, 1, 4)
    assert (str(prior.at(None)), str(prior.at(7))) == ("while/body::scatter:pre1", "while/body::scatter:pre1@7")
    for bad in ["noport", "op:x", "op:res", "op:pre", ":1", "op:1@x"]:
        with pytest.raises(ValueError):
            TensorRef.parse(bad)


def test_a_deterministic_verdict_states_how_rare_a_hidden_difference_can_be():
    assert facts.verdict(SAME, None, None).rate_bound == pytest.approx(1 - 0.05 ** (1 / 3))
    twenty = trajectory(*[[5]] * 20)
    assert facts.verdict(twenty, None, None).rate_bound == pytest.approx(0.139, abs=1e-3)
    assert facts.verdict(VARIES, None, None).rate_bound is None


def test_runs_without_recorded_outputs_are_compared_by_their_variables():
    assert Runs(outputs=[], after=[{"w": 1}, {"w": 2}]).distinct() == 2
    assert Runs(outputs=[], after=[{"w": 1}, {"w": 1}]).deterministic()


def rung(replicas: int, varies: bool, env: dict | None = None, sources: tuple = ()) -> Rung:
    return Rung(label=f"{replicas}", limit=0 if env is not None else replicas, env=env or {}, replicas=replicas,
                nondeterministic=varies, distinct=3 if varies else 1, runs=5,
                rate_bound=None if varies else 0.45, sources=list(sources))


@pytest.mark.parametrize("rungs, conclusion, nccl", [
    ([rung(1, True, sources=("noise (PyFunc, op)",)), rung(2, True)], "in_replica", ""),
    ([rung(1, False), rung(2, True)], "needs_replicas", ""),
    ([rung(1, False), rung(2, False)], "deterministic", ""),
    ([rung(2, True), rung(2, True)], "unchanged", ""),
    # NCCL rungs (GPUs): the difference follows them when one of them makes the full rung identical
    ([rung(1, False), rung(2, True), rung(2, False, {"NCCL_ALGO": "Ring"}), rung(2, True, {"NCCL_NVLS_ENABLE": "0"})],
     "needs_replicas", "follows NCCL: identical under NCCL_ALGO=Ring"),
    ([rung(1, False), rung(2, True), rung(2, True, {"NCCL_ALGO": "Ring"})], "needs_replicas", "does not follow"),
])
def test_the_replica_ladder_decides_from_the_rungs_verdicts(rungs, conclusion, nccl):
    from opbisect.analysis.ladder import decide

    ladder = decide(rungs, analysed="2")
    assert ladder.conclusion == conclusion
    assert (nccl in ladder.nccl) if nccl else ladder.nccl == ""
    if conclusion == "in_replica":
        assert "noise (PyFunc, op)" in ladder.reason  # names what varies with one replica
    if conclusion == "needs_replicas":
        assert "45%" in ladder.reason  # an identical rung says how little its runs rule out
