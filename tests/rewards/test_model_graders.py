"""The model-backed graders: `model` (a sequence-classification reward model's logit) and `judge` (a chat model's
greedy reply parsed into a score within `range`), on tiny local models and on a scripted backend for the parser;
a `multi` of judge + string_check with a formula; parse failures are per-sample reward errors; invalid specs name
the field."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from grader_models import HIGH, LOW, build_digit_judge, build_reward_model
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

from contract.rewards import validate_reward_spec
from contract.rewards.model_graders import model_refs, parse_score
from contract.spec import JobSpec
from workers.local import train_local
from workers.models import build_tiny_model
from workers.rewards import build_reward
from workers.rewards.grader_models import LocalGraderModels

OUT = "{{ sample.output_text }}"
RUBRIC = [{"role": "system", "content": "Grade 0-10. Reply with the number only."},
          {"role": "user", "content": "Question: {{ sample.prompt }}\nReference: {{ item.answer }}\nAnswer: " + OUT}]


class Scripted:
    """A GraderModels whose judge replies are given: records the conversations it was asked."""

    def __init__(self, replies: list[str]):
        self.replies, self.asked = replies, list[list[dict[str, str]]]()

    def classify(self, model: str, texts: Sequence[str], *, max_length: int, batch_size: int) -> list[float]:
        return [float(len(text)) for text in texts]

    def chat(self, model: str, conversations: Sequence[list[dict[str, str]]], *, max_tokens: int,
             batch_size: int) -> list[str]:
        self.asked += list(conversations)
        return [self.replies[i % len(self.replies)] for i in range(len(conversations))]


def _judge(**params: Any) -> dict[str, Any]:
    return {"type": "judge", "params": {"model": "judge", "input": RUBRIC, "range": [0, 10], **params}}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("grader-models")
    return {"rm": build_reward_model(root / "rm"), "flat-rm": build_reward_model(root / "flat", zero_head=True),
            "judge": build_digit_judge(root / "judge")}


def test_reward_model_scores_are_its_logits_in_batches(models: dict[str, Path]) -> None:
    backend = LocalGraderModels(models)
    items: list[tuple[str, str, dict[str, Any]]] = [
        ("Q: 2+2? A:", " 4", {}), ("Q: capital of France? A:", " Paris, of course", {}), ("x", "y", {})]
    outcomes = build_reward({"type": "model", "params": {"model": "rm", "batch_size": 2}}, backend).score_many(items)
    tokenizer = AutoTokenizer.from_pretrained(models["rm"])
    net = AutoModelForSequenceClassification.from_pretrained(models["rm"]).eval()
    for (prompt, response, _), outcome in zip(items, outcomes, strict=True):
        with torch.no_grad():  # one unpadded text: the logit at its last token
            want = net(**tokenizer(prompt + response, return_tensors="pt")).logits[0, 0].item()
        assert outcome.error is None and outcome.value == pytest.approx(want, abs=1e-4)
    flat = build_reward({"type": "model", "params": {"model": "flat-rm", "transform": "sigmoid"}}, backend)
    assert [o.value for o in flat.score_many(items)] == [0.5, 0.5, 0.5]  # sigmoid(0)


def test_judge_on_a_tiny_chat_model_returns_its_parsed_greedy_reply(models: dict[str, Path]) -> None:
    backend = LocalGraderModels(models)
    reward = build_reward(_judge(max_tokens=1, batch_size=2), backend)
    items = [("What is 2+2?", "4", {"answer": "4"}), ("Name a colour.", "blue", {"answer": "red"}),
             ("Say hi.", "hello there, friend", {"answer": "hi"})]
    outcomes = reward.score_many(items)
    tokenizer = AutoTokenizer.from_pretrained(models["judge"])
    net = AutoModelForCausalLM.from_pretrained(models["judge"]).eval()
    for (prompt, response, meta), outcome in zip(items, outcomes, strict=True):
        conversation = [RUBRIC[0], {"role": "user", "content": f"Question: {prompt}\nReference: {meta['answer']}\n"
                                                               f"Answer: {response}"}]
        text = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
        with torch.no_grad():
            reply = str(tokenizer.decode(net(ids).logits[0, -1].argmax().item()))
        assert reply in (HIGH, LOW)
        assert outcome.error is None and outcome.value == float(reply)
    assert reward.score(*items[0]).value == outcomes[0].value  # batched and alone agree


def test_judge_parser() -> None:
    pattern = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)")
    assert parse_score("Score: 7/10", pattern, 0, 10) == 7.0
    assert parse_score(" 0.25", pattern, 0, 1) == 0.25
    with pytest.raises(ValueError, match="holds no score"):
        parse_score("excellent!", pattern, 0, 10)
    with pytest.raises(ValueError, match=r"outside range \[0, 10\]"):
        parse_score("11", pattern, 0, 10)
    grouped = re.compile(r"<score>(.*?)</score>")
    assert parse_score("2 steps. <score>-1.5</score>", grouped, -2, 2) == -1.5
    with pytest.raises(ValueError, match="holds no score"):
        parse_score("<score>high</score>", grouped, -2, 2)


def test_judge_renders_the_rubric_and_records_parse_failures_as_sample_errors() -> None:
    backend = Scripted(["8", "I cannot grade this", "42"])
    reward = build_reward(_judge(), backend)
    outcomes = reward.score_many([("2+2?", "4", {"answer": "4"})] * 3 + [("2+2?", "4", {})])
    assert backend.asked[0] == [RUBRIC[0], {"role": "user", "content": "Question: 2+2?\nReference: 4\nAnswer: 4"}]
    assert len(backend.asked) == 3  # the sample whose item lacks `answer` is never sent
    assert outcomes[0].error is None and outcomes[0].value == 8.0
    assert outcomes[1].value == 0.0 and "judge reply 'I cannot grade this' holds no score" in str(outcomes[1].error)
    assert "outside range [0, 10]" in str(outcomes[2].error)
    assert "item has no 'answer'" in str(outcomes[3].error)


def test_multi_of_judge_and_string_check_with_a_formula() -> None:
    spec = {"type": "multi", "params": {"graders": {
        "judge": _judge()["params"] | {"type": "judge"},
        "exact": {"type": "string_check", "input": OUT, "reference": "{{ item.answer }}", "operation": "eq"},
    }, "calculate_output": "0.5 * judge / 10 + 0.5 * exact"}}
    reward = build_reward(spec, Scripted(["6", "no idea"]))
    good, failed = reward.score_many([("2+2?", "4", {"answer": "4"}), ("2+2?", "5", {"answer": "4"})])
    assert good.error is None and good.value == pytest.approx(0.8)
    assert good.components == {"reward": pytest.approx(0.8), "judge": 6.0, "exact": 1.0}
    assert failed.value == 0.0 and "grader 'judge': judge reply 'no idea' holds no score" in str(failed.error)


def test_model_graders_without_a_backend_validate_but_cannot_score() -> None:
    validate_reward_spec(_judge())
    outcome = build_reward({"type": "model", "params": {"model": "rm"}}).score("p", "r", {})
    assert outcome.error is not None and "runs on the generation pool" in outcome.error


def test_unloadable_or_unresolved_models_are_sample_errors(tmp_path: Path) -> None:
    backend = LocalGraderModels({"broken": tmp_path})
    assert "could not be loaded as a sequence-classification model" in str(
        build_reward({"type": "model", "params": {"model": "broken"}}, backend).score("p", "r", {}).error)
    assert "not among this job's resolved grader models" in str(
        build_reward({"type": "model", "params": {"model": "other"}}, backend).score("p", "r", {}).error)


@pytest.mark.parametrize(("spec", "names"), [
    ({"type": "model", "params": {}}, "missing required params ['model']"),
    ({"type": "model", "params": {"model": ""}}, "param 'model'"),
    ({"type": "model", "params": {"model": "rm", "transform": "tanh"}}, "param 'transform'"),
    ({"type": "model", "params": {"model": "rm", "batch_size": 0}}, "param 'batch_size'"),
    (_judge(range=[5, 1]), "param 'range'"),
    (_judge(range=[0, math.inf]), "params.range[1]"),
    (_judge(input="rate it"), "param 'input'"),
    (_judge(input=[{"role": "robot", "content": OUT}]), "param 'input[0]'.role"),
    (_judge(input=[{"role": "user", "content": "{{ sample.output_json }}"}]), "param 'input[0]'.content"),
    (_judge(score_regex="("), "param 'score_regex'"),
    (_judge(max_tokens=5000), "param 'max_tokens'"),
    (_judge(sampling_params={"temperature": 1}), "unknown params ['sampling_params']"),
    ({"type": "multi", "params": {"graders": {"j": {"type": "judge", "model": "m"}}, "calculate_output": "j"}},
     "graders.j: reward 'judge': missing required params ['input']"),
])
def test_invalid_model_grader_specs_name_the_field(spec: dict[str, Any], names: str) -> None:
    with pytest.raises(ValueError) as err:
        validate_reward_spec(spec)
    assert names in str(err.value)


def test_model_refs_name_the_field_of_every_model() -> None:
    spec = {"type": "composite", "components": [
        {"type": "model", "params": {"model": "rm"}},
        {"type": "multi", "params": {"graders": {"j": {"type": "judge", "model": "judge"}}}},
    ]}
    assert model_refs(spec) == [(("reward", "components", 0, "params", "model"), "model", "rm"),
                                (("reward", "components", 1, "params", "graders", "j", "model"), "judge", "judge")]


def test_train_local_scores_with_a_judge_multi_and_times_it(models: dict[str, Path], tmp_path: Path) -> None:
    """Colocated / train-local: the judge is a local directory (no registry), loaded next to the policy; the
    iteration row carries reward_seconds and each sample the sub-scores."""
    policy = build_tiny_model("tiny-1m", tmp_path / "policy")
    reward = {"type": "multi", "params": {"graders": {
        "judge": _judge(max_tokens=1)["params"] | {"type": "judge", "model": str(models["judge"])},
        "exact": {"type": "string_check", "input": OUT, "reference": "{{ item.answer }}", "operation": "eq"},
    }, "calculate_output": "judge / 10 + exact"}}
    spec = JobSpec.model_validate({
        "model": str(policy), "dataset": {"builtin": "arithmetic", "num_prompts": 8}, "reward": reward,
        "algorithm": {"name": "grpo", "group_size": 2}, "generation": {"max_tokens": 4, "batch_size": 8},
        "training": {"iterations": 1, "prompts_per_iteration": 2, "micro_batch_size": 4}})
    result = train_local(spec, tmp_path / "out", eval_every=0)
    (record,) = result.records
    assert record.metrics["reward_errors"] == 0 and record.metrics["reward_seconds"] > 0, record.metrics
    assert 0.3 <= record.reward <= 1.7  # each sample: judge 3 or 7 over 10, plus exact 0 or 1
