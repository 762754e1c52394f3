"""Chat-completions request handling without workers: parameter validation (unsupported ones named), message
flattening, stop-string handling of streamed text, rendering with the model's chat template, model ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.services import openai_inference as chat
from backend.services.openai_compat import OpenAIError

MESSAGES = [{"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "12+"}, {"type": "text", "text": "35="}]}]


def refused(body: dict, param: str) -> None:
    with pytest.raises(OpenAIError) as info:
        chat.parse({"model": "m", "messages": MESSAGES, **body})
    assert info.value.param == param and info.value.status_code == 400, info.value.detail


def test_valid_requests_and_their_defaults() -> None:
    request = chat.parse({"model": "m", "messages": MESSAGES, "max_completion_tokens": 5, "stop": "\n", "user": "u"})
    assert chat.max_tokens(request) == 5 and chat.stop_strings(request) == ["\n"]
    assert chat.messages(request) == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "12+35="}]
    assert chat.max_tokens(chat.parse({"model": "m", "messages": MESSAGES})) == chat.DEFAULT_MAX_TOKENS


@pytest.mark.parametrize(("body", "param"), [
    ({"tools": [{"type": "function"}]}, "tools"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"made_up": 1}, "made_up"),
    ({"top_logprobs": 2, "logprobs": True, "stream": True}, "top_logprobs"),
    ({"top_logprobs": 21, "logprobs": True}, "top_logprobs"),
    ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"n": 0}, "n"),
    ({"temperature": 3}, "temperature"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, "messages[0].content[0]"),
    ({"messages": []}, "messages"),
])
def test_bad_or_unsupported_parameters_are_named(body: dict, param: str) -> None:
    refused(body, param)


def test_streamed_text_never_runs_past_a_stop_string() -> None:
    assert chat.cut_at_stop("abc\n\nd", ["\n\n"]) == "abc"
    assert chat.safe_prefix("abc\n", ["\n\n"]) == "abc"  # "\n" may become the stop string: held back
    assert chat.safe_prefix("abc\ufffd", []) == "abc"  # half a character
    assert chat.safe_prefix("abcx", ["\n\n", "xyz"]) == "abc"
    assert chat.safe_prefix("abc", ["\n\n"]) == "abc"


def test_prepare_renders_with_the_models_chat_template(tmp_path: Path) -> None:
    from workers.models import build_tiny_model

    model_dir = build_tiny_model("chat-qwen2-1m", tmp_path / "qwen", seed=0)
    request = chat.parse({"model": "m", "messages": MESSAGES, "temperature": 0, "n": 2, "seed": 3, "logprobs": True})
    prepared = chat.prepare(request, chat.Served("m", str(model_dir), None, None))
    text = chat.decode(prepared.renderer, prepared.prompt_ids)
    assert "Be brief." in text and "12+35=" in text and text.rstrip().endswith("assistant")
    assert (prepared.sample.n, prepared.sample.seed, prepared.sample.temperature, prepared.sample.logprobs) \
        == (2, 3, 0.0, True)


@pytest.mark.parametrize(("model_id", "groups"), [
    ("ft:base:team:sums:12", ("ft:base:team:sums:12", "12", None)),
    ("ft:base:team:sums:12:ckpt-step-4", ("ft:base:team:sums:12", "12", "4")),
    ("chat-tiny", None),
])
def test_fine_tuned_ids(model_id: str, groups: tuple | None) -> None:
    match = chat.CHECKPOINT.match(model_id)
    assert (match.group("name", "job", "step") if match else None) == groups
