"""Multi-turn episodes (workers/core/episode.py) on the tiny BPE chat model and the hf engine: how episodes end,
which tokens the loss mask trains (checked by decoding), hostile user environments in the jail, and the trainer's
masked loss (hand-built gradient check, token-budget micro-batching)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import pytest
import torch
from transformers import AutoTokenizer

from contract.sample import PromptRequest, Sample
from contract.spec import EnvironmentSpec, JobSpec
from workers.core.episode import EpisodeRunner, describe_tools, parse_tool_calls, run_episodes
from workers.core.rollout import sampling_params
from workers.environments import build_environment
from workers.models import build_tiny_model
from workers.rewards import build_reward
from workers.rewards.jail import missing_piece
from workers.runtime import components
from workers.training.batch import collate, policy_forward
from workers.training.trainer import Trainer

PRESET = "chat-qwen2-1m"


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(PRESET, tmp_path_factory.mktemp("chat") / "model")


def _spec(model: Path, environment: dict[str, Any], **generation: Any) -> JobSpec:
    return JobSpec(model=str(model), dataset={"builtin": "arithmetic"}, environment=environment,
                   generation={"max_tokens": 32, **generation})


def _requests(n: int, **meta: Any) -> list[PromptRequest]:
    return [PromptRequest(sample_id=f"0:{i}:0", group_id=f"0:{i}", prompt_id=str(i), iteration=0, prompt_ids=[1],
                          prompt_text=f"row {i}", meta={"prompt_id": str(i), **meta}, seed=i) for i in range(n)]


def _run(model: Path, spec: JobSpec, n: int = 4, **meta: Any) -> list[Sample]:
    tokenizer = AutoTokenizer.from_pretrained(model)
    assert spec.environment is not None
    env = build_environment(spec.environment)
    grader = build_reward(spec.environment.grader) if spec.environment.grader is not None else None
    try:
        runner = EpisodeRunner(env, tokenizer, spec.environment, sampling_params(spec.generation))
        engine = components.make_engine(spec, model, device="cpu")
        return run_episodes(engine, runner, _requests(n, **meta), job_id=1, instance_id="test", grader=grader)
    finally:
        env.close()


def _decode(model: Path, ids: list[int]) -> str:
    return str(AutoTokenizer.from_pretrained(model).decode(ids, skip_special_tokens=False))


def test_tool_calls_follow_the_documented_convention() -> None:
    calls, errors = parse_tool_calls('x <tool_call>{"name": "calculate", "arguments": {"expression": "2*3"}}'
                                     '</tool_call> <tool_call>{oops}</tool_call>', turn=1)
    assert calls == [{"id": "call_1_0", "type": "function",
                      "function": {"name": "calculate", "arguments": {"expression": "2*3"}}}]
    assert len(errors) == 1 and "tool call 1" in errors[0]


def test_tools_are_described_in_one_line_each_for_templates_without_tools() -> None:
    from contract.environments import Calculator

    assert describe_tools(Calculator.tools) == ("- calculate(expression: string): Evaluate an arithmetic expression "
                                                "(+ - * / ** and parentheses).")
    odd: list[dict[str, Any]] = [
        {"function": 3},
        {"name": "x", "parameters": {"properties": {"a": 1, "b": {"type": "number"}}, "required": ["b"]}}]
    assert describe_tools(odd) == "- ?()\n- x(a?: any, b: number)"  # user TOOLS are read defensively


def test_calculator_demonstrations_open_as_the_episodes_do_and_answer_right(chat_model: Path) -> None:
    from workers.environments.demos import calculator_demonstrations

    spec = _spec(chat_model, {"type": "calculator", "params": {"operands": 2, "max_operand": 9}})
    assert spec.environment is not None
    runner = EpisodeRunner(build_environment(spec.environment), AutoTokenizer.from_pretrained(chat_model),
                           spec.environment, sampling_params(spec.generation))
    request = _requests(1)[0]
    demos = calculator_demonstrations([{"prompt": request.prompt_text, **request.meta}], runner.opening,
                                      {"operands": 2, "max_operand": 9}, answer_weight=2)
    assert len(demos) == 3 and demos[1] == demos[2]
    episode, _ = runner.start(request)
    assert demos[0]["prompt"] == episode.messages  # what the policy sees at the first turn
    calls, _ = parse_tool_calls(demos[0]["answer"], turn=1)
    expression = calls[0]["function"]["arguments"]["expression"]
    assert expression in episode.messages[-1]["content"]
    assert demos[1]["prompt"][-1]["role"] == "tool" and demos[1]["answer"] == demos[1]["prompt"][-1]["content"]
    assert float(demos[1]["answer"]) == eval(expression)  # noqa: S307 - the test's own arithmetic


def test_an_episode_without_tool_calls_ends_when_the_environment_is_done(chat_model: Path) -> None:
    samples = _run(chat_model, _spec(chat_model, {"type": "calculator", "max_turns": 4}))
    assert len(samples) == 4
    for sample in samples:
        assert sample.episode_end == "done" and sample.turns == 1 and sample.reward_error is None
        assert sample.loss_mask == [1] * len(sample.response_ids)  # one turn: every token is the policy's
        assert sample.reward in (0.0, 1.0) and "calculate" in sample.prompt_text  # tools described in the prompt


def test_feedback_runs_to_max_turns_and_the_mask_excludes_every_environment_token(chat_model: Path) -> None:
    """guess_number answers every wrong guess (the random model's) with feedback: multi-turn episodes."""
    spec = _spec(chat_model, {"type": "guess_number", "params": {"low": 1, "high": 1000}, "max_turns": 3,
                              "max_episode_tokens": 4000}, max_tokens=12)
    samples = _run(chat_model, spec)
    multi = [s for s in samples if s.turns > 1]
    assert multi, [s.response_text for s in samples]
    for sample in multi:
        assert sample.loss_mask is not None and sample.turn_spans is not None and sample.messages is not None
        assert sample.episode_end in ("max_turns", "done") and sample.turns <= 3
        trained = [t for t, m in zip(sample.response_ids, sample.loss_mask, strict=True) if m]
        context = [t for t, m in zip(sample.response_ids, sample.loss_mask, strict=True) if not m]
        assert sum(e - s for s, e in sample.turn_spans) == len(trained)
        assert all(sample.loss_mask[s:e] == [1] * (e - s) for s, e in sample.turn_spans)
        feedback = [m["content"] for m in sample.messages[2:] if m["role"] in ("user", "tool")]
        assert feedback
        context_text, trained_text = _decode(chat_model, context), _decode(chat_model, trained)
        assert "<|im_start|>assistant" in context_text and "<|im_start|>assistant" not in trained_text
        for text in feedback:
            assert text in context_text and text not in trained_text
        assert all(lp == 0.0 for lp, m in zip(sample.behaviour_logprobs, sample.loss_mask, strict=True) if not m)
        assert all(lp != 0.0 for lp, m in zip(sample.behaviour_logprobs, sample.loss_mask, strict=True) if m)
        segments = sample.segments or []
        assert "".join(seg["text"] for seg in segments) == _decode(chat_model, sample.response_ids)
    assert any(s.episode_end == "max_turns" and s.turns == 3 for s in multi)


def test_an_episode_stops_at_max_episode_tokens(chat_model: Path) -> None:
    spec = _spec(chat_model, {"type": "guess_number", "params": {"low": 1, "high": 1000}, "max_turns": 8,
                              "max_episode_tokens": 40}, max_tokens=12)
    ends = set()
    for sample in _run(chat_model, spec):
        assert len(sample.response_ids) <= 40
        ends.add(sample.episode_end)
        if sample.episode_end == "max_episode_tokens":
            assert sample.truncated
    assert "max_episode_tokens" in ends


def test_calculator_tool_calls_are_evaluated_and_the_final_answer_rewarded() -> None:
    from contract.environments import bind_builtin
    from workers.environments.base import InProcessEnvironment

    env = InProcessEnvironment("calculator", bind_builtin("calculator", {}))
    row = {"prompt": "row 0", "prompt_id": "0", "expression": "12 * 3 - 4"}
    opening = env.reset(row)
    assert "12 * 3 - 4" in opening[-1]["content"]
    calls, _ = parse_tool_calls('<tool_call>{"name": "calculate", "arguments": {"expression": "12*3-4"}}'
                                '</tool_call>', turn=1)
    talk = [*opening, {"role": "assistant", "content": "", "tool_calls": calls}]
    messages, reward, done = env.step(talk, row)
    assert messages == [{"role": "tool", "content": "32", "name": "calculate", "tool_call_id": "call_1_0"}]
    assert reward is None and not done
    _, reward, done = env.step([*talk, *messages, {"role": "assistant", "content": "32"}], row)
    assert reward == 1.0 and done


OUT = "{{ sample.output_text }}"


def test_an_environment_grader_scores_the_final_answer_on_top_of_the_steps(chat_model: Path) -> None:
    grader = {"type": "multi", "params": {"graders": {
        "said": {"type": "string_check", "input": OUT, "reference": "\u0001never", "operation": "ne"},  # always 1
        "exact": {"type": "string_check", "input": OUT, "reference": "{{ item.answer }}", "operation": "eq"},
    }, "calculate_output": "said + 2 * exact"}}
    spec = _spec(chat_model, {"type": "calculator", "max_turns": 2, "grader": grader}, max_tokens=16)
    assert spec.grading == (spec.environment.grader, ("environment", "grader"))  # type: ignore[union-attr]
    samples = _run(chat_model, spec, n=6, answer="4")
    for sample in samples:
        assert sample.reward_error is None and sample.messages is not None
        final = next(m["content"] for m in reversed(sample.messages) if m["role"] == "assistant")
        exact = float(final == "4")
        steps = sum(r for r in sample.turn_rewards or [] if r is not None)
        assert sample.reward == pytest.approx(steps + 1.0 + 2 * exact), (sample.reward, steps, final)
        parts = sample.reward_components  # the multi's sub-scores, under grader.
        assert {k: parts[k] for k in ("environment", "grader", "grader.said", "grader.exact")} == {
            "environment": steps, "grader": 1.0 + 2 * exact, "grader.said": 1.0, "grader.exact": exact}, parts

    missing = {"type": "string_check", "params": {"input": OUT, "reference": "{{ item.nowhere }}", "operation": "eq"}}
    failed = _run(chat_model, _spec(chat_model, {"type": "calculator", "max_turns": 2, "grader": missing},
                                    max_tokens=16), n=2)
    for sample in failed:  # a grader that cannot score fails the episode's reward, naming the grader
        assert sample.reward == 0.0 and sample.reward_error is not None, sample.reward_error
        assert sample.reward_error.startswith("environment.grader: ") and "nowhere" in sample.reward_error
    assert JobSpec(model="m", dataset={"builtin": "arithmetic"}, environment={"type": "calculator"}).grading is None


def test_environment_specs_are_checked_naming_the_field(chat_model: Path) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"type": "python"}, "needs `code`"), ({"type": "calculator", "params": {"x": 1}}, "no param"),
        ({"type": "python", "code": "def ("}, "does not compile"),
        ({"type": "calculator", "max_turns": 0}, "max_turns")]
    for bad, words in cases:
        with pytest.raises(pydantic.ValidationError) as info:
            _spec(chat_model, bad)
        assert words in str(info.value) and "environment" in str(info.value)
    with pytest.raises(pydantic.ValidationError, match="reward of one completion does not apply with `environment`"):
        JobSpec(model="m", dataset={"builtin": "arithmetic"}, environment={"type": "calculator"},
                reward={"type": "python", "code": "def reward(p, r, m):\n    return 1.0\n"})
    assert EnvironmentSpec(type="guess_number", params={"high": 8}).params == {"high": 8}


# -- user environments in the jail -----------------------------------------------------------------------------------
RESET = "def reset(row):\n    return [{'role': 'user', 'content': 'go'}]\n"
HOSTILE = {
    "loops": ("def step(messages, row):\n    while True:\n        pass\n", "time limit exceeded"),
    "crashes": ("import os\ndef step(messages, row):\n    os._exit(3)\n", "exited with status 3"),
    "raises": ("def step(messages, row):\n    raise RuntimeError('boom')\n", "RuntimeError: boom"),
    "malformed": ("def step(messages, row):\n    return {'messages': 'hello', 'done': False}\n",
                  "must be a list of messages"),
    "bad_done": ("def step(messages, row):\n    return {'messages': [], 'reward': 1.0, 'done': 'yes'}\n",
                 "done'] must be true or false"),
    "floods": ("def step(messages, row):\n    print('x' * 300000)\n    return {'messages': [], 'done': True}\n",
               "printed"),
    "reads_shadow": ("def step(messages, row):\n    return {'messages': [{'role': 'user', 'content': "
                     "open('/etc/shadow').read()}], 'done': False}\n", "No such file or directory"),
    "writes_outside": ("def step(messages, row):\n    open('/harness/planted', 'w').write('x')\n"
                       "    return {'messages': [], 'done': True}\n", "Read-only file system"),
}


@pytest.mark.skipif(missing_piece() is not None, reason=f"reward jail unavailable: {missing_piece()}")
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_misbehaving_user_environment_fails_its_episode_with_the_reason(chat_model: Path, case: str) -> None:
    code, reason = HOSTILE[case]
    spec = _spec(chat_model, {"type": "python", "code": RESET + code, "step_timeout_s": 1.0}, max_tokens=8)
    samples = _run(chat_model, spec, n=2)
    assert len(samples) == 2
    for sample in samples:
        assert sample.episode_end == "error" and sample.reward == 0.0
        assert sample.reward_error is not None and sample.reward_error.startswith("environment step:")
        assert reason in sample.reward_error, sample.reward_error


@pytest.mark.skipif(missing_piece() is not None, reason=f"reward jail unavailable: {missing_piece()}")
def test_a_user_environment_in_the_jail_runs_multi_turn_episodes(chat_model: Path) -> None:
    code = RESET + ("TOOLS = [{'type': 'function', 'function': {'name': 'noop', 'parameters': {}}}]\n"
                    "def step(messages, row):\n"
                    "    turns = sum(1 for m in messages if m['role'] == 'assistant')\n"
                    "    return {'messages': [{'role': 'user', 'content': 'again ' + str(turns)}], 'reward': 0.5,\n"
                    "            'done': turns >= 2}\n")
    samples = _run(chat_model, _spec(chat_model, {"type": "python", "code": code}, max_tokens=8), n=3)
    for sample in samples:
        assert sample.reward_error is None and sample.episode_end == "done" and sample.turns == 2
        assert sample.reward == pytest.approx(1.0) and sample.turn_rewards == [0.5, 0.5]
        assert sample.loss_mask is not None and 0 in sample.loss_mask
        masked = [t for t, m in zip(sample.response_ids, sample.loss_mask, strict=True) if not m]
        assert "again 1" in _decode(chat_model, masked)
        assert "noop" in sample.prompt_text


# -- the masked loss -------------------------------------------------------------------------------------------------
def _sample(i: int, prompt: list[int], response: list[int], mask: list[int] | None) -> Sample:
    return Sample(job_id=1, prompt_id=str(i), group_id=f"0:{i}", sample_id=f"0:{i}:0", policy_version=0,
                  prompt_ids=prompt, response_ids=response, behaviour_logprobs=[-2.0] * len(response),
                  finish_reason="stop", reward=1.0, loss_mask=mask)


def _grads(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {name: p.grad.detach().clone() for name, p in trainer.model.named_parameters() if p.grad is not None}


def _trainer(model: Path, **training: Any) -> Trainer:
    spec = JobSpec(model=str(model), dataset={"builtin": "arithmetic"},
                   training={"max_tokens_per_micro_batch": 0, **training}, generation={"temperature": 1.0})
    return Trainer(model, spec, device="cpu")


def test_a_masked_sample_trains_only_its_policy_tokens(chat_model: Path) -> None:
    response = list(range(40, 60))
    mask = [1] * 6 + [0] * 5 + [1] * 4 + [0] * 3 + [1] * 2
    masked = _sample(0, [5, 6, 7], response, mask)
    trainer = _trainer(chat_model)
    metrics = trainer.micro_step([masked], advantages=[1.0])
    assert metrics["tokens"] == sum(mask)
    got = _grads(trainer)

    # by hand: the clipped surrogate summed over the policy tokens only (advantage 1, ratio vs behaviour -2.0)
    reference = _trainer(chat_model)
    batch = collate([_sample(0, [5, 6, 7], response, None)], reference.pad_id)
    logprobs = policy_forward(reference.model, batch, 1.0).logprobs[0]
    ratio = torch.exp(logprobs - (-2.0))
    per_token = -torch.min(ratio, torch.clamp(ratio, 0.8, 1.2))
    keep = torch.tensor(mask, dtype=torch.bool)
    per_token[keep].sum().backward()
    want = _grads(reference)
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-6, msg=name)


def test_token_budget_micro_batches_give_the_same_masked_gradient(chat_model: Path) -> None:
    samples = [_sample(0, [5, 6, 7], list(range(40, 60)), [1] * 8 + [0] * 6 + [1] * 6),
               _sample(1, [5, 9], list(range(70, 75)), None),
               _sample(2, [8, 6, 7, 9], list(range(80, 92)), [1] * 3 + [0] * 4 + [1] * 5),
               _sample(3, [5], list(range(30, 33)), None)]
    advantages = [1.0, -0.5, 0.3, -1.0]
    whole = _trainer(chat_model)
    whole.micro_step(samples, advantages)
    budget = _trainer(chat_model, max_tokens_per_micro_batch=24)
    budget.micro_step(samples, advantages)
    assert whole._tokens == budget._tokens == sum(s.trained_tokens for s in samples)
    want, got = _grads(whole), _grads(budget)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("algorithm", ["ppo", "reinforce_pp", "rloo", "grpo"])
def test_every_algorithm_trains_on_masked_samples(chat_model: Path, algorithm: str) -> None:
    spec = JobSpec(model=str(chat_model), dataset={"builtin": "arithmetic"}, algorithm={"name": algorithm},
                   training={"max_tokens_per_micro_batch": 0})
    trainer = Trainer(chat_model, spec, device="cpu")
    samples = [_sample(0, [5, 6], list(range(40, 52)), [1] * 4 + [0] * 4 + [1] * 4),
               _sample(0, [5, 6], list(range(60, 70)), [1] * 10)]
    for s in samples:
        s.group_id = "0:0"
    samples[1].reward = 0.0
    metrics = trainer.train_iteration(samples)
    assert metrics["tokens"] == 18 and torch.isfinite(torch.tensor(metrics["loss"]))


def test_episode_truncation_is_counted_per_turn(chat_model: Path) -> None:
    """Every turn cut at max_tokens while the episode ends at max_turns: the episode is truncated (it used to read
    "0% truncated"), and the per-turn share counts each cut turn."""
    from workers.runtime import metrics

    spec = _spec(chat_model, {"type": "guess_number", "params": {"low": 1, "high": 1000}, "max_turns": 3,
                              "max_episode_tokens": 4000}, max_tokens=3)
    samples = _run(chat_model, spec)
    for sample in samples:
        cut_turns = sum(1 for s, e in sample.turn_spans or [] if e - s >= 3)  # a turn that ran to max_tokens
        assert sample.turns_truncated == cut_turns, (sample.turn_spans, sample.turns_truncated)
    assert any(s.episode_end == "max_turns" and s.turns_truncated == s.turns for s in samples)
    row = metrics.sample_metrics(samples, train_version=0)
    assert row["truncated_fraction"] == sum(1 for s in samples if s.truncated or s.turns_truncated) / len(samples)
    assert row["truncated_fraction"] > 0
    assert row["turns_truncated_fraction"] == sum(s.turns_truncated for s in samples) / sum(s.turns for s in samples)
    assert Sample.from_json(samples[0].to_json()).turns_truncated == samples[0].turns_truncated
