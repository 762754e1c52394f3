"""/openai/v1/completions' request handling (backend/services/openai_completions.py): what it takes, what it refuses
(400 naming the parameter), and the prompt it sends. The route against a live instance, through the official openai
client: tests/integration/test_tinker_sdk.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.services import openai_completions as completions
from backend.services.inference import SampleResult
from backend.services.openai_compat import OpenAIError
from backend.services.openai_inference import Served


@pytest.mark.parametrize(("body", "param"), [
    ({"stream": True}, "stream"),
    ({"echo": True}, "echo"),
    ({"suffix": "x"}, "suffix"),
    ({"best_of": 2}, "best_of"),
    ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"logit_bias": {"1": 2}}, "logit_bias"),
    ({"logprobs": 6}, "logprobs"),
    ({"prompt": ["a", "b"]}, "prompt"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"n": 0}, "n"),
])
def test_bad_or_unsupported_parameters_are_named(body: dict, param: str) -> None:
    with pytest.raises(OpenAIError) as info:
        completions.parse({"model": "m", "prompt": "12+35=", **body})
    assert info.value.param == param and info.value.status_code == 400, info.value.detail


def test_prompt_as_text_or_ids_and_the_response(tmp_path: Path) -> None:
    from workers.models import build_tiny_model

    model_dir = build_tiny_model("chat-qwen2-1m", tmp_path / "qwen", seed=0)
    served = Served("m", str(model_dir), None, None)
    request = completions.parse({"model": "m", "prompt": "12+35=", "logprobs": 2, "temperature": 0, "stop": "\n"})
    plan = completions.prepare(request, served)
    assert plan.sample.topk_logprobs == 2 and plan.sample.logprobs and plan.sample.stop == ["\n"]
    assert plan.sample.max_tokens == completions.DEFAULT_MAX_TOKENS and plan.sample.temperature == 0.0
    assert completions.prepare(completions.parse({"model": "m", "prompt": plan.prompt_ids}), served).prompt_ids \
        == plan.prompt_ids == completions.prepare(completions.parse({"model": "m", "prompt": ["12+35="]}),
                                                  served).prompt_ids
    with pytest.raises(OpenAIError, match="token ids are non-negative"):
        completions.prepare(completions.parse({"model": "m", "prompt": [1, -2]}), served)
    ids = plan.tokenizer.encode("47\nmore", add_special_tokens=False).ids
    top = [[[t, 5], [-0.1, -3.0]] for t in ids]
    result = SampleResult(token_ids=ids, logprobs=[-0.1] * len(ids), finish_reason="stop", topk_logprobs=top)
    body = completions.response(request, plan, [result], "cmpl-1", 7)
    choice = body["choices"][0]
    assert choice["text"] == "47" and body["object"] == "text_completion"  # cut before the stop string
    assert choice["logprobs"]["token_logprobs"] == [-0.1] * len(ids) and len(choice["logprobs"]["top_logprobs"]) \
        == len(ids) and all(len(t) == 2 for t in choice["logprobs"]["top_logprobs"])
    assert choice["logprobs"]["text_offset"][0] == 0
    assert body["usage"] == {"prompt_tokens": len(plan.prompt_ids), "completion_tokens": len(ids),
                             "total_tokens": len(plan.prompt_ids) + len(ids)}
