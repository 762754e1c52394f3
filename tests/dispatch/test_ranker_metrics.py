"""Length ranker (online refit, history), recall@top-k%, skew metrics and the dispatch-policy factory."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contract.skew import PTLProfile
from workers.datasets.long_tail import generate_rows
from workers.dispatch.metrics import length_ratio, recall_top, skew_metrics, tail_fraction
from workers.dispatch.policies import setup_dispatch
from workers.dispatch.ranker import FeatureRidgeRanker, OracleRanker, setup_ranker


def test_recall_top():
    true = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert recall_top(true, true, 0.2) == 1.0
    assert recall_top(list(reversed(true)), true, 0.2) == 0.0
    assert recall_top([0, 0, 0, 0, 0, 0, 0, 0, 11, 0], true, 0.2) == 0.5
    assert recall_top([], [], 0.2) == 1.0
    with pytest.raises(ValueError, match="frac"):
        recall_top([1], [1], 0.0)
    with pytest.raises(ValueError, match="entries"):
        recall_top([1, 2], [1], 0.5)


def test_ranker_generalises_from_features_to_unseen_prompts():
    train, held_out = generate_rows(400, seed=1), generate_rows(200, seed=2)
    ranker = FeatureRidgeRanker()
    ranker.observe_many([r["prompt_id"] for r in train], [r["prompt"] for r in train],
                        [len(r["answer"]) + 1 for r in train])
    ranker.refit()
    pred = ranker.predict([r["prompt_id"] for r in held_out], [r["prompt"] for r in held_out])
    assert recall_top(pred, [len(r["answer"]) for r in held_out], 0.2) >= 0.7


def test_ranker_uses_a_prompts_earlier_lengths():
    ranker = FeatureRidgeRanker()
    rng = random.Random(0)
    rows = [(f"p{i}", "same prompt text", rng.choice([5, 10, 400])) for i in range(50)]
    for pid, prompt, length in rows:
        ranker.observe(pid, prompt, length)
    ranker.refit()
    pred = ranker.predict([pid for pid, _, _ in rows], [prompt for _, prompt, _ in rows])
    assert recall_top(pred, [length for _, _, length in rows], 0.2) == 1.0  # features alone cannot tell them apart
    assert ranker.predict(["new"], ["same prompt text"])[0] > 0  # unseen: the ridge model's guess
    assert sorted(ranker.recent_lengths()) == sorted(length for _, _, length in rows)


def test_untrained_ranker_and_bad_inputs():
    ranker = setup_ranker("features")
    assert ranker.predict(["a", "b"], ["x", "y"]) == [0.0, 0.0]
    with pytest.raises(ValueError, match="prompt ids"):
        ranker.predict(["a"], [])
    with pytest.raises(ValueError, match="length"):
        ranker.observe("a", "x", -1)
    with pytest.raises(ValueError, match="unknown length ranker"):
        setup_ranker("llm")


def test_skew_metrics():
    assert length_ratio([10] * 98 + [1000] * 2) == pytest.approx(100.0)
    assert length_ratio([7] * 5) == 1.0
    # 10 samples finish at 1..9 s and the last at 20 s: 90% are done at 9 s, the tail is 11 of 20 s
    finished = [float(t) for t in range(1, 10)] + [20.0]
    assert tail_fraction(0.0, finished) == pytest.approx(11 / 20)
    metrics = skew_metrics(0.0, [5.0] * 9 + [50.0], finished, ["a"] * 5 + ["b"] * 5, predicted=[9.0] + [1.0] * 9)
    assert metrics.instance_finish_s == {"a": 5.0, "b": 20.0}
    assert metrics.makespan_s == 20.0 and metrics.recall_top20 == 0.5 and metrics.recall_top10 == 0.0
    assert set(metrics.to_dict()) >= {"length_ratio", "tail_fraction", "instance_finish_s", "recall_top5"}


def test_setup_dispatch_policies_assign_every_row_once():
    rows = generate_rows(40, seed=3)
    ptl = PTLProfile(((1, 0.01), (16, 0.02)))
    oracle = OracleRanker({r["prompt_id"]: float(len(r["answer"])) for r in rows})
    for name in ("random", "round_robin", "skew_aware"):
        policy = setup_dispatch(name, n_instances=3, max_batch_size=8, ptl=ptl, ranker=oracle)
        per_instance = policy.assign(rows)
        assert len(per_instance) == 3
        assert sorted(r["prompt_id"] for inst in per_instance for r in inst) == sorted(r["prompt_id"] for r in rows)
    skew = setup_dispatch("skew_aware", n_instances=3, max_batch_size=8, ptl=ptl, ranker=oracle)
    for inst in skew.assign(rows):  # longest-predicted-first inside every instance
        assert [len(r["answer"]) for r in inst] == sorted((len(r["answer"]) for r in inst), reverse=True)


def test_skew_aware_policy_learns_online():
    rows = generate_rows(60, seed=4)
    policy = setup_dispatch("skew_aware", n_instances=2, max_batch_size=8, ptl=PTLProfile(((1, 0.01),)))
    policy.assign(rows)
    policy.observe(rows, [len(r["answer"]) + 1 for r in rows])
    policy.end_iteration()
    policy.assign(rows)
    assert policy.last_predicted is not None
    assert recall_top(policy.last_predicted, [len(r["answer"]) for r in rows], 0.2) >= 0.9


@pytest.mark.parametrize(("kwargs", "fragment"), [({"policy": "fastest"}, "unknown dispatch policy"),
                                                  ({"policy": "skew_aware"}, "needs a PTL profile")])
def test_setup_dispatch_errors(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        setup_dispatch(kwargs["policy"], n_instances=2, max_batch_size=4)


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(0, 300), max_size=40), n_instances=st.integers(1, 6), max_bs=st.integers(1, 16),
       policy=st.sampled_from(["random", "round_robin", "skew_aware"]))
def test_every_policy_assigns_every_row_exactly_once(lengths, n_instances, max_bs, policy):
    rows = [{"prompt_id": f"p{i}", "prompt": f"rep {n} a:"} for i, n in enumerate(lengths)]
    ranker = FeatureRidgeRanker()
    ranker.observe_many([r["prompt_id"] for r in rows], [r["prompt"] for r in rows], lengths)
    ranker.refit()
    dispatch = setup_dispatch(policy, n_instances=n_instances, max_batch_size=max_bs,
                              ptl=PTLProfile(((1, 0.01), (16, 0.03))), ranker=ranker)
    per_instance = dispatch.assign(rows)
    assert len(per_instance) == n_instances
    assert sorted(r["prompt_id"] for inst in per_instance for r in inst) == sorted(r["prompt_id"] for r in rows)


def test_tail_fraction_stays_a_fraction_when_the_window_starts_after_most_samples_finished() -> None:
    # async: the window is clamped to the previous iteration's end (10.0); 9 of 10 samples finished before it
    finished = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.5]
    assert tail_fraction(10.0, finished) == pytest.approx(1.0)
    assert 0.0 <= tail_fraction(9.5, finished) <= 1.0
