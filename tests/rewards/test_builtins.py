"""Built-in rewards, composites and spec validation."""

import pytest

from contract.rewards.builtins import extract_number
from workers.rewards import build_reward


@pytest.mark.parametrize(
    ("params", "response", "answer", "want"),
    [
        ({}, " 47 ", "47", 1.0),
        ({}, "47", "48", 0.0),
        ({"strip": False}, " 47", "47", 0.0),
        ({"case_sensitive": False}, "Paris", "paris", 1.0),
        ({}, "Paris", "paris", 0.0),
    ],
)
def test_exact_match(params, response, answer, want):
    reward = build_reward({"type": "exact_match", "params": params})
    assert reward.score("q", response, {"answer": answer}).value == want


def test_exact_match_missing_answer_is_a_per_sample_error():
    out = build_reward({"type": "exact_match"}).score("q", "1", {})
    assert out.value == 0.0 and "answer" in (out.error or "")


@pytest.mark.parametrize(
    ("response", "answer", "want"),
    [("the answer is 42", 42, 1.0), ("1,000 apples", "1000", 1.0), ("3.5 then 7", "7", 1.0), ("none", "7", 0.0),
     ("-2e3", "-2000", 1.0), ("41.9999999", "42", 1.0), ("41.9", "42", 0.0)],
)
def test_numeric(response, answer, want):
    assert build_reward({"type": "numeric"}).score("q", response, {"answer": answer}).value == want


def test_numeric_first_position_and_number_extraction():
    reward = build_reward({"type": "numeric", "params": {"position": "first"}})
    assert reward.score("q", "7 not 8", {"answer": "7"}).value == 1.0
    assert extract_number("no digits") is None
    assert extract_number("x=-.5") == -0.5


def test_regex_format_length_penalty():
    regex = build_reward({"type": "regex", "params": {"pattern": "^ans", "flags": "i", "score_miss": -1.0}})
    assert regex.score("q", "ANSWER: 3", {}).value == 1.0
    assert regex.score("q", "3", {}).value == -1.0
    fmt = build_reward({"type": "format"})
    assert fmt.score("q", " -12 ", {}).value == 1.0
    assert fmt.score("q", "12 apples", {}).value == 0.0
    pen = build_reward({"type": "length_penalty", "params": {"target": 4, "coef": 0.1, "max_penalty": 0.5}})
    assert pen.score("q", "abcd", {}).value == 0.0
    assert pen.score("q", "abcdef", {}).value == pytest.approx(-0.2)
    assert pen.score("q", "a" * 100, {}).value == -0.5


def test_composite_weights_and_components():
    reward = build_reward({
        "type": "composite",
        "components": [
            {"type": "exact_match", "weight": 1.0},
            {"type": "length_penalty", "weight": 0.5, "params": {"target": 1, "coef": 0.1}},
            {"type": "format", "weight": 0.25},
        ],
    })
    out = reward.score("q", "47", {"answer": "47"})
    assert out.error is None
    assert out.components == pytest.approx({"exact_match": 1.0, "length_penalty": -0.1, "format": 1.0})
    assert out.value == pytest.approx(1.0 - 0.05 + 0.25)
    many = reward.score_many([("q", "47", {"answer": "47"}), ("q", "x", {"answer": "47"})])
    assert many[0] == out and many[1].value == pytest.approx(0.0)


def test_composite_component_error_names_the_component():
    reward = build_reward({"type": "composite", "components": [{"type": "format"}, {"type": "exact_match"},
                                                                {"type": "exact_match"}]})
    out = reward.score("q", "1", {})
    assert out.value == 0.0 and "exact_match" in (out.error or "") and "exact_match#2" in (out.error or "")


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"type": "nope"}, "unknown reward type 'nope'"),
        ({"type": "exact_match", "params": {"tolerance": 1}}, "unknown params ['tolerance']"),
        ({"type": "regex"}, "missing required params ['pattern']"),
        ({"type": "regex", "params": {"pattern": "("}}, "not a valid regular expression"),
        ({"type": "regex", "params": {"pattern": "a", "flags": "q"}}, "unknown regex flag"),
        ({"type": "numeric", "params": {"tol": "big"}}, "param 'tol' must be"),
        ({"type": "numeric", "params": {"position": "middle"}}, "'first' or 'last'"),
        ({"type": "python", "code": "def reward(p, r, m): return 1", "params": {"cpu": 1}}, "unknown params"),
        ({"type": "python", "code": "def reward(p, r, m): return 1", "params": {"timeout_s": 0}}, "timeout_s"),
        ({"type": "composite", "components": [{"type": "format"}], "params": {"x": 1}}, "takes no params"),
    ],
)
def test_bad_specs_name_what_is_wrong(spec, fragment):
    with pytest.raises(ValueError, match=None) as info:
        build_reward(spec)
    assert fragment in str(info.value)
