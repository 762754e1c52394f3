"""Model-backed graders: `model` (a registered sequence-classification reward model) and `judge` (OpenAI's
`score_model`: a registered chat model asked a rubric, its greedy reply parsed into a score within `range`).

Torch-free: a binder checks the params and returns a BatchGrader that calls the `GraderModels` backend
(contract/rewards/graders.py) it was bound with; the generation instance binds workers/rewards/grader_models.py,
which loads each model once per process with transformers on the instance's device. Bound without a backend
(submit-time validation) a grader checks its params only and its every sample is an error. `model` names a model
registered in the job's team; `model_refs(spec)` lists a reward spec's references (with the field path) so the
control plane checks them at submit (registered, ready, of the right kind) and hands their directories to the workers.

- model: the classifier reads `prompt + response` as one text (the prompt as the policy saw it, chat template
  included), truncated from the left to `max_length` tokens; the score is its logit (num_labels=1), or with
  `transform: sigmoid` 1 / (1 + e^-logit), in (0, 1).
- judge: `input` is OpenAI's messages list [{role, content}], each content a Template ({{ sample.output_text }},
  {{ sample.prompt }}, {{ item.KEY }}); the reply (greedy, at most `max_tokens` tokens) is parsed by `score_regex`
  (its first match; its first group when it has one) into a float, which must lie in `range` [min, max]. A reply with
  no match, or a value outside the range, is that sample's error (the reply is quoted), never a crash.
Both: optional `pass_threshold` (the sample passes when score >= it) and `batch_size` (samples per forward pass).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from contract.rewards.builtins import REWARDS
from contract.rewards.graders import BatchGrader, GraderFn, GraderModels, Item, Template, check_fields
from contract.rewards.safe_regex import compile_pattern

KINDS = {"model": "classifier", "judge": "chat"}  # the grader -> the kind of model it needs (checked at submit)
TRANSFORMS = ("none", "sigmoid")
ROLES = ("system", "developer", "user", "assistant")
MAX_MESSAGES = 16
MAX_TOKENS = 1024
MAX_LENGTH = 32768
MAX_BATCH = 256
DEFAULT_SCORE_REGEX = r"[-+]?(?:\d+\.?\d*|\.\d+)"
MAX_REPLY_QUOTE = 200


class ModelGraderUnbound(ValueError):
    """A model-backed grader was asked to score without a model backend (only the generation pool has one)."""


def _int(kind: str, key: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"reward {kind!r}: param {key!r} must be an integer in [{low}, {high}], got {value!r}")
    return value


def _number(kind: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"reward {kind!r}: param {key!r} must be a finite number, got {value!r}")
    return float(value)


def _model_name(kind: str, params: Mapping[str, Any]) -> str:
    name = params["model"]
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise ValueError(f"reward {kind!r}: param 'model' must be a registered model's name, got {name!r}")
    return name


def _threshold(kind: str, params: Mapping[str, Any]) -> None:
    if params.get("pass_threshold") is not None:
        _number(kind, "pass_threshold", params["pass_threshold"])


def _unbound(kind: str, models: GraderModels | None) -> GraderModels:
    if models is None:
        raise ModelGraderUnbound(f"reward {kind!r} needs its model: it runs on the generation pool")
    return models


@REWARDS.register("model", label="reward model", grader=True, sub=True, required=("model",),
                  defaults={"transform": "none", "max_length": 1024, "batch_size": 16, "pass_threshold": None})
def bind_model(params: Mapping[str, Any], models: GraderModels | None = None) -> GraderFn:
    """A registered sequence-classification reward model's logit for prompt + response (optionally sigmoid)."""
    check_fields("model", params)
    name = _model_name("model", params)
    transform = params.get("transform", "none")
    if transform not in TRANSFORMS:
        raise ValueError(f"reward 'model': param 'transform' must be one of {list(TRANSFORMS)}, got {transform!r}")
    max_length = _int("model", "max_length", params.get("max_length", 1024), 8, MAX_LENGTH)
    batch_size = _int("model", "batch_size", params.get("batch_size", 16), 1, MAX_BATCH)
    _threshold("model", params)

    def many(items: Sequence[Item]) -> list[Any]:
        backend = _unbound("model", models)
        logits = backend.classify(name, [prompt + response for prompt, response, _ in items], max_length=max_length,
                                  batch_size=batch_size)
        if transform == "none":
            return list(logits)
        return [1.0 / (1.0 + math.exp(-x)) if x >= -700 else 0.0 for x in logits]

    return BatchGrader(many)


def _messages(params: Mapping[str, Any]) -> list[tuple[str, Template]]:
    raw = params["input"]
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_MESSAGES:
        raise ValueError(f"reward 'judge': param 'input' must be a list of 1 to {MAX_MESSAGES} messages "
                         f"{{role, content}}")
    out: list[tuple[str, Template]] = []
    for i, message in enumerate(raw):
        where = f"reward 'judge': param 'input[{i}]'"
        if not isinstance(message, Mapping) or set(message) - {"role", "content", "type"}:
            raise ValueError(f"{where} must be a message {{role, content}}")
        if message.get("role") not in ROLES:
            raise ValueError(f"{where}.role must be one of {list(ROLES)}, got {message.get('role')!r}")
        role = "system" if message["role"] == "developer" else str(message["role"])
        out.append((role, Template(message.get("content"), f"{where}.content")))
    return out


def _range(params: Mapping[str, Any]) -> tuple[float, float]:
    raw = params.get("range", [0, 1])
    if not isinstance(raw, list | tuple) or len(raw) != 2:
        raise ValueError(f"reward 'judge': param 'range' must be [min, max], got {raw!r}")
    low, high = _number("judge", "range", raw[0]), _number("judge", "range", raw[1])
    if not low < high:
        raise ValueError(f"reward 'judge': param 'range' must have min < max, got {raw!r}")
    return low, high


def _pattern(params: Mapping[str, Any]) -> Any:
    """RE2 (linear time, contract/rewards/safe_regex.py): a judge's reply cannot stall the batch it is in."""
    return compile_pattern(params.get("score_regex", DEFAULT_SCORE_REGEX), "", "reward 'judge': param 'score_regex'")


def parse_score(reply: str, pattern: Any, low: float, high: float) -> float:
    """The score in a judge's reply; ValueError (quoting the reply) when it holds none or one outside [low, high]."""
    quoted = repr(reply[:MAX_REPLY_QUOTE] + ("..." if len(reply) > MAX_REPLY_QUOTE else ""))
    match = pattern.search(reply)
    text = None if match is None else match.group(1) if pattern.groups else match.group(0)
    try:
        value = float(text) if text is not None else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"judge reply {quoted} holds no score")
    if not low <= value <= high:
        raise ValueError(f"judge score {value:g} is outside range [{low:g}, {high:g}] (reply {quoted})")
    return value


@REWARDS.register("judge", label="LLM judge", grader=True, sub=True, required=("model", "input"),
                  defaults={"range": [0, 1], "max_tokens": 32, "score_regex": DEFAULT_SCORE_REGEX, "batch_size": 16,
                            "pass_threshold": None})
def bind_judge(params: Mapping[str, Any], models: GraderModels | None = None) -> GraderFn:
    """OpenAI's score_model: a registered chat model's greedy reply to a rubric, parsed into a score in `range`."""
    check_fields("judge", params)
    name = _model_name("judge", params)
    messages = _messages(params)
    low, high = _range(params)
    pattern = _pattern(params)
    max_tokens = _int("judge", "max_tokens", params.get("max_tokens", 32), 1, MAX_TOKENS)
    batch_size = _int("judge", "batch_size", params.get("batch_size", 16), 1, MAX_BATCH)
    _threshold("judge", params)

    def many(items: Sequence[Item]) -> list[Any]:
        backend = _unbound("judge", models)
        out: list[Any] = [None] * len(items)
        asked: list[tuple[int, list[dict[str, str]]]] = []
        for i, (prompt, response, meta) in enumerate(items):
            try:
                asked.append((i, [{"role": role, "content": t.render(response, meta, prompt)} for role, t in messages]))
            except KeyError as exc:
                out[i] = exc
        replies = backend.chat(name, [conversation for _, conversation in asked], max_tokens=max_tokens,
                               batch_size=batch_size) if asked else []
        for (i, _), reply in zip(asked, replies, strict=True):
            try:
                out[i] = parse_score(reply, pattern, low, high)
            except ValueError as exc:
                out[i] = exc
        return out

    return BatchGrader(many)


def model_refs(spec: Any, path: tuple[str | int, ...] = ("reward",)) -> list[tuple[tuple[str | int, ...], str, str]]:
    """(field path, grader kind, model name) of every model-backed grader in a reward spec (a RewardSpec or its
    dict), composites' components and multi's sub-graders included; the path names the `model` field."""
    data = spec.model_dump() if hasattr(spec, "model_dump") else spec
    if not isinstance(data, Mapping):
        return []
    refs: list[tuple[tuple[str | int, ...], str, str]] = []
    params = data.get("params") or {}
    kind = data.get("type")
    if kind in KINDS and isinstance(params.get("model"), str):
        refs.append(((*path, "params", "model"), str(kind), params["model"]))
    if kind == "multi" and isinstance(params.get("graders"), Mapping):
        for sub_name, sub in params["graders"].items():
            if isinstance(sub, Mapping) and sub.get("type") in KINDS and isinstance(sub.get("model"), str):
                refs.append(((*path, "params", "graders", sub_name, "model"), str(sub["type"]), sub["model"]))
    for i, child in enumerate(data.get("components") or []):
        refs += model_refs(child, (*path, "components", i))
    return refs
