"""OpenAI-style graders (contract/rewards/graders.py) give the values OpenAI's grader docs define, on inputs whose
scores are derived by hand; `multi` formulas are arithmetic only; invalid specs name the field."""

from __future__ import annotations

import math
from typing import Any

import pytest

from contract.rewards import validate_reward_spec
from contract.rewards.formula import Formula
from workers.rewards import build_reward

OUT = "{{ sample.output_text }}"


def _grade(kind: str, response: str, item: dict[str, Any] | None = None, **params: Any) -> Any:
    outcome = build_reward({"type": kind, "params": params}).score("", response, item or {})
    assert outcome.error is None, outcome.error
    return outcome


@pytest.mark.parametrize(("operation", "response", "expected"), [
    ("eq", "Paris", 1.0), ("eq", "paris", 0.0), ("ne", "paris", 1.0), ("ne", "Paris", 0.0),
    ("like", "The answer is Paris.", 1.0), ("like", "The answer is PARIS.", 0.0),
    ("ilike", "The answer is PARIS.", 1.0), ("ilike", "London", 0.0),
])
def test_string_check_operations(operation: str, response: str, expected: float) -> None:
    outcome = _grade("string_check", response, {"answer": "Paris"}, input=OUT, reference="{{item.answer}}",
                     operation=operation)
    assert outcome.value == expected


def test_templates_reach_nested_item_keys_and_missing_keys_are_sample_errors() -> None:
    spec = {"type": "string_check", "params": {"input": "[{{ sample.output_text }}]", "operation": "eq",
                                               "reference": "[{{ item.gold.text }}]"}}
    reward = build_reward(spec)
    assert reward.score("", "42", {"gold": {"text": "42"}}).value == 1.0
    missing = reward.score("", "42", {"answer": "42"})
    assert missing.value == 0.0 and missing.error is not None and "item has no 'gold'" in missing.error


def test_fuzzy_match_is_rapidfuzz_ratio() -> None:
    # kitten / sitting: longest common subsequence "ittn" (4), ratio = 2 * 4 / (6 + 7) = 8/13
    outcome = _grade("text_similarity", "kitten", {"ref": "sitting"}, input=OUT, reference="{{item.ref}}",
                     evaluation_metric="fuzzy_match")
    assert outcome.value == pytest.approx(8 / 13)


def test_bleu_and_rouge_values() -> None:
    same = "the quick brown fox jumps over the lazy dog"
    assert _grade("text_similarity", same, {"ref": same}, input=OUT, reference="{{item.ref}}",
                  evaluation_metric="bleu").value == pytest.approx(1.0)
    assert _grade("text_similarity", "cats everywhere", {"ref": same}, input=OUT, reference="{{item.ref}}",
                  evaluation_metric="bleu").value == 0.0
    # rouge_1: 2 of 3 unigrams shared each way -> F = 2/3; rouge_l: LCS "a c d" of 4 tokens each -> 3/4
    assert _grade("text_similarity", "the cat ran", input=OUT, reference="the cat sat",
                  evaluation_metric="rouge_1").value == pytest.approx(2 / 3)
    assert _grade("text_similarity", "a c d e", input=OUT, reference="a b c d",
                  evaluation_metric="rouge_l").value == pytest.approx(3 / 4)
    assert _grade("text_similarity", "the cat ran", input=OUT, reference="the cat sat",
                  evaluation_metric="rouge_2").value == pytest.approx(1 / 2)


def test_multi_combines_named_sub_graders_with_a_formula() -> None:
    params = {"graders": {
        "exact": {"type": "string_check", "name": "exact", "input": OUT, "reference": "{{item.ref}}",
                  "operation": "ilike"},
        "fuzzy": {"type": "text_similarity", "input": OUT, "reference": "sitting", "evaluation_metric": "fuzzy_match"},
    }, "calculate_output": "0.5 * exact + 0.5 * fuzzy^2 - min(exact, 0) + floor(0.9)"}
    outcome = _grade("multi", "kitten", {"ref": "KIT"}, **params)
    assert outcome.components == {"reward": pytest.approx(0.5 + 0.5 * (8 / 13) ** 2), "exact": 1.0,
                                  "fuzzy": pytest.approx(8 / 13)}
    assert outcome.value == pytest.approx(0.5 + 0.5 * (8 / 13) ** 2)


def test_formula_evaluator_arithmetic() -> None:
    text = "-(a + b) / 2 + a ** 2 + max(a, b, 0.25) + abs(-b) + ceil(0.1) + sqrt(4) + log(exp(2))"
    formula = Formula(text, {"a", "b"})
    assert formula.evaluate({"a": 1.0, "b": 0.5}) == pytest.approx(-0.75 + 1 + 1 + 0.5 + 1 + 2 + 2)
    assert formula.used == {"a", "b"}
    with pytest.raises(ValueError, match="division by zero"):
        Formula("a / b", {"a", "b"}).evaluate({"a": 1.0, "b": 0.0})
    with pytest.raises(ValueError, match="math domain error"):
        Formula("sqrt(a)", {"a"}).evaluate({"a": -1.0})
    with pytest.raises(ValueError, match="exponent"):
        Formula("a ** 1000000", {"a"}).evaluate({"a": 2.0})
    assert math.isclose(Formula("2 ^ 3", set()).evaluate({}), 8.0)


@pytest.mark.parametrize(("formula", "why"), [
    ("__import__('os').system('true')", "is not allowed"),
    ("__import__('os')", "calling '__import__' is not allowed"),
    ("a.__class__", "Attribute"),
    ("open('/etc/passwd')", "calling 'open' is not allowed"),
    ("eval('1')", "calling 'eval' is not allowed"),
    ("a[0]", "Subscript"),
    ("(lambda: 1)()", "is not allowed"),
    ("[x for x in (1,)]", "ListComp"),
    ("a if a else 1", "IfExp"),
    ("a > 0", "Compare"),
    ("'text'", "only numbers"),
    ("max(a, key=abs)", "plain argument"),
    ("c + 1", "unknown name 'c'"),
    ("a +", "not an expression"),
])
def test_malicious_or_invalid_formulas_are_refused(formula: str, why: str) -> None:
    with pytest.raises(ValueError, match="calculate_output") as err:
        validate_reward_spec({"type": "multi", "params": {
            "graders": {"a": {"type": "string_check", "input": OUT, "reference": "x", "operation": "eq"}},
            "calculate_output": formula}})
    assert why in str(err.value)


@pytest.mark.parametrize(("kind", "params", "names"), [
    ("string_check", {"input": OUT, "reference": "x", "operation": "contains"}, "param 'operation'"),
    ("string_check", {"input": OUT, "operation": "eq"}, "missing required params ['reference']"),
    ("string_check", {"input": "{{ sample.output_json }}", "reference": "x", "operation": "eq"}, "param 'input'"),
    ("string_check", {"input": "{{ foo.bar }}", "reference": "x", "operation": "eq"}, "param 'input'"),
    ("string_check", {"input": OUT, "reference": 3, "operation": "eq"}, "param 'reference' must be a string"),
    ("text_similarity", {"input": OUT, "reference": "x", "evaluation_metric": "rouge_9"}, "evaluation_metric"),
    ("text_similarity", {"input": OUT, "reference": "x", "evaluation_metric": "cosine"}, "not supported here"),
    ("text_similarity", {"input": OUT, "reference": "x", "evaluation_metric": "bleu", "pass_threshold": 2},
     "pass_threshold"),
    ("multi", {"graders": {}, "calculate_output": "1"}, "param 'graders'"),
    ("multi", {"graders": {"x": {"type": "python"}}, "calculate_output": "x"}, "graders.x.type"),
    ("multi", {"graders": {"max": {"type": "string_check", "input": OUT, "reference": "x", "operation": "eq"}},
               "calculate_output": "1"}, "grader name 'max'"),
    ("multi", {"graders": {"x": {"type": "string_check", "input": OUT, "reference": "x", "operation": "is"}},
               "calculate_output": "x"}, "graders.x: reward 'string_check': param 'operation'"),
])
def test_invalid_grader_specs_name_the_field(kind: str, params: dict[str, Any], names: str) -> None:
    with pytest.raises(ValueError) as err:
        validate_reward_spec({"type": kind, "params": params})
    assert names in str(err.value)


def test_graders_compose_with_builtins() -> None:
    reward = build_reward({"type": "composite", "components": [
        {"type": "string_check", "params": {"input": OUT, "reference": "{{item.answer}}", "operation": "like"}},
        {"type": "length_penalty", "weight": 1.0, "params": {"target": 1, "coef": 0.1}},
    ]})
    outcome = reward.score("", "42!", {"answer": "42"})
    assert outcome.error is None and outcome.value == pytest.approx(1.0 - 0.2)
