"""pass@k (the unbiased estimator), suite summaries, retention of the best checkpoints, and the spec's checks."""

from __future__ import annotations

import itertools
from math import comb

import pytest
from pydantic import ValidationError

from contract.evaluation import best_of, metric_value, pass_at_k, retained, summarize
from contract.spec import JobSpec


def brute_pass_at_k(outcomes: list[bool], k: int) -> float:
    """The fraction of k-subsets of the samples holding at least one pass (what the estimator estimates exactly)."""
    subsets = list(itertools.combinations(range(len(outcomes)), k))
    return sum(any(outcomes[i] for i in subset) for subset in subsets) / len(subsets)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 0, 1), (5, 1, 1), (5, 2, 3), (10, 3, 5), (4, 4, 2), (6, 1, 6)])
def test_pass_at_k_is_the_unbiased_estimator(n: int, c: int, k: int) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k))
    assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k([True] * c + [False] * (n - c), k))


def test_pass_at_k_refuses_impossible_counts() -> None:
    for n, c, k in [(3, 4, 1), (3, 1, 0), (3, 1, 4)]:
        with pytest.raises(ValueError, match="need 0 <= c <= n"):
            pass_at_k(n, c, k)


def test_summary_of_a_hand_made_suite() -> None:
    scores = [[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.5]]  # 0.5 is below the threshold 1.0
    got = summarize(scores, k=2, threshold=1.0)
    assert got["mean"] == pytest.approx(5.5 / 12)
    assert got["pass@1"] == pytest.approx((2 / 4 + 0 + 3 / 4) / 3)
    want_k = (1 - comb(2, 2) / comb(4, 2) + 0 + 1.0) / 3
    assert got["pass@k"] == pytest.approx(want_k)
    assert (got["k"], got["prompts"], got["samples"]) == (2, 3, 12)
    assert summarize(scores, k=2, threshold=0.5)["pass@1"] == pytest.approx((2 / 4 + 0 + 1) / 3)


def test_retention_keeps_the_top_by_metric_the_newest_and_the_unscored() -> None:
    values = {10: 0.2, 20: 0.9, 30: 0.7, 40: 0.1, 50: None}
    assert retained(list(values), values, keep=1, select="best") == {20, 50}
    assert retained(list(values), {**values, 50: 0.05}, keep=2, select="best") == {20, 30, 50}
    assert retained(list(values), values, keep=2, select="latest") == {40, 50}
    assert best_of(values) == 20 and best_of({1: None}) is None
    assert best_of({3: 0.5, 7: 0.5}) == 7  # equals: the newest
    assert metric_value({"held": {"mean": 0.25}}, "held/mean") == 0.25
    assert metric_value({"held": {"mean": 0.25}}, "other/mean") is None


def spec(**overrides: object) -> dict[str, object]:
    return {"model": "m", "dataset": {"builtin": "arithmetic"}, **overrides}


def test_spec_checks_name_the_field() -> None:
    suite = {"name": "held", "dataset": {"builtin": "arithmetic", "eval_prompts": 4}, "samples_per_prompt": 4, "k": 2}
    ok = JobSpec.model_validate(spec(evaluation=[suite], evaluation_every=5,
                                     checkpoint={"select": "best", "metric": "held/pass@k", "keep": 2}))
    assert ok.evaluation[0].pass_k == 2 and ok.evaluation[0].scorer is None
    with pytest.raises(ValidationError, match="names no evaluation suite"):
        JobSpec.model_validate(spec(checkpoint={"select": "best", "metric": "held/mean"}))
    with pytest.raises(ValidationError, match="select best needs"):
        JobSpec.model_validate(spec(evaluation=[suite], checkpoint={"select": "best", "metric": "held"}))
    with pytest.raises(ValidationError, match="suite names must be unique"):
        JobSpec.model_validate(spec(evaluation=[suite, suite]))
    with pytest.raises(ValidationError, match="k \\(5\\) must be at most samples_per_prompt"):
        JobSpec.model_validate(spec(evaluation=[{**suite, "k": 5}]))
    with pytest.raises(ValidationError, match="reward or grader, not both"):
        JobSpec.model_validate(spec(evaluation=[{**suite, "reward": {"type": "exact_match"},
                                                 "grader": {"type": "exact_match"}}]))
