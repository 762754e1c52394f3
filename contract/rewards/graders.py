"""OpenAI-style graders as reward types: `string_check`, `text_similarity` and `multi` (OpenAI's grader docs).

A grader's params are OpenAI's fields. `input` and `reference` are templates: `{{ sample.output_text }}` is the
response, `{{ sample.prompt }}` the prompt as the policy saw it, `{{ item.KEY }}` (dotted paths reach nested keys) the
dataset row's meta; an item key the row lacks is a per-sample error (KeyError), an unknown namespace or sample field a
spec error.
- string_check: operation eq (input == reference), ne (!=), like (reference is a substring of input), ilike (the
  same, case-insensitive) -> 1.0 or 0.0.
- text_similarity: evaluation_metric fuzzy_match (rapidfuzz's normalized Indel ratio), bleu (sacrebleu sentence
  BLEU / 100), rouge_1..rouge_5 and rouge_l (rouge-score F-measure) -> the score in [0, 1]; optional pass_threshold
  in [0, 1]: the sample passes when score >= pass_threshold (reported by `passed`; the reward is the score).
- multi: graders {name: sub-grader (any registered with `sub=True`: string_check, text_similarity, model, judge;
  `type` plus its fields)} and calculate_output, a formula over the names (contract/rewards/formula.py) ->
  {"reward": formula value, name: sub-score...}; a sub-grader's per-sample error is the sample's error, named.

Each is registered in REWARDS (contract/rewards/builtins.py) by its binder with meta `grader=True` (bind_builtin
calls binder(params, models), `models` the GraderModels backend or None), its `required` and optional (`defaults`)
params, and `sub=True` where `multi` may nest it. contract/rewards/__init__.py imports this module (and
model_graders.py), so the registrations exist wherever rewards are used. A binder returns fn(prompt, response, meta);
a `BatchGrader` also scores a batch at once (`many`), which the model-backed graders need.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from contract.rewards.builtins import REWARDS
from contract.rewards.formula import FUNCTIONS, Formula

GraderFn = Callable[[str, str, Mapping[str, Any]], Any]
Item = tuple[str, str, Mapping[str, Any]]  # (prompt, response, meta)
SAMPLE_ERRORS = (KeyError, ValueError, TypeError, OverflowError, ZeroDivisionError)  # a sample's, not the spec's
OPERATIONS = ("eq", "ne", "like", "ilike")
METRICS = ("fuzzy_match", "bleu", "rouge_1", "rouge_2", "rouge_3", "rouge_4", "rouge_5", "rouge_l")
UNSUPPORTED_METRICS = ("gleu", "meteor", "cosine")  # OpenAI's, needing nltk data or an embedding model
MAX_SUB_GRADERS = 16
_TEMPLATE = re.compile(r"\{\{(.*?)\}\}")
_PATH = re.compile(r"\s*(sample|item)\.([A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)*)\s*")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


class Template:
    """A string with `{{ sample.output_text }}` / `{{ item.path }}` holes, checked when built."""

    def __init__(self, text: Any, where: str):
        if not isinstance(text, str):
            raise ValueError(f"{where} must be a string (a template), got {text!r}")
        self.parts: list[str | tuple[str, list[str]]] = []
        last = 0
        for hole in _TEMPLATE.finditer(text):
            match = _PATH.fullmatch(hole.group(1))
            if match is None:
                raise ValueError(f"{where}: {hole.group(0)!r} is not {{{{ sample.output_text }}}} or "
                                 f"{{{{ item.KEY }}}}")
            namespace, path = match.group(1), match.group(2).split(".")
            if namespace == "sample" and path not in (["output_text"], ["prompt"]):
                raise ValueError(f"{where}: {hole.group(0)!r}: the sample namespace has only output_text and prompt")
            self.parts += [text[last:hole.start()], (namespace, path)]
            last = hole.end()
        self.parts.append(text[last:])

    def render(self, response: str, meta: Mapping[str, Any], prompt: str = "") -> str:
        out: list[str] = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            namespace, path = part
            if namespace == "sample":
                out.append(response if path == ["output_text"] else prompt)
                continue
            value: Any = meta
            for depth, key in enumerate(path):
                if not isinstance(value, Mapping) or key not in value:
                    raise KeyError(f"item has no {'.'.join(path[:depth + 1])!r} (needed by the grader's template)")
                value = value[key]
            out.append(value if isinstance(value, str) else json.dumps(value))
        return "".join(out)


class GraderModels(Protocol):
    """What the model-backed graders call (workers/rewards/grader_models.py implements it with transformers).
    `model` is a registered model's name; results come in the order of the inputs."""

    def classify(self, model: str, texts: Sequence[str], *, max_length: int, batch_size: int) -> list[float]:
        """A sequence-classification model's logit (its single label) for each text."""
        ...

    def chat(self, model: str, conversations: Sequence[list[dict[str, str]]], *, max_tokens: int,
             batch_size: int) -> list[str]:
        """A chat model's greedy reply to each conversation (rendered with its chat template)."""
        ...


class BatchGrader:
    """A grader that scores batches: `many(items)` -> per item its score, or the exception that item raised (a
    per-sample error); called on one item it returns the score or raises."""

    def __init__(self, many: Callable[[Sequence[Item]], list[Any]]):
        self.many = many

    def __call__(self, prompt: str, response: str, meta: Mapping[str, Any]) -> Any:
        result = self.many([(prompt, response, meta)])[0]
        if isinstance(result, Exception):
            raise result
        return result


def grade_many(fn: GraderFn, items: Sequence[Item]) -> list[Any]:
    """`fn` over `items`: batched where it is a BatchGrader, else one by one; a sample's error is its result (an
    error of the whole batch, such as a model that does not load, is every sample's)."""
    if isinstance(fn, BatchGrader):
        try:
            return fn.many(items)
        except SAMPLE_ERRORS as exc:
            return [exc] * len(items)
    out: list[Any] = []
    for prompt, response, meta in items:
        try:
            out.append(fn(prompt, response, meta))
        except SAMPLE_ERRORS as exc:
            out.append(exc)
    return out


def check_fields(kind: str, params: Mapping[str, Any]) -> None:
    """Unknown or missing params (as registered) are errors; `name` (OpenAI's) is accepted and ignored."""
    meta = REWARDS.entry(kind).meta
    required, optional = tuple(meta["required"]), tuple(meta["defaults"])
    unknown = sorted(set(params) - set(required) - set(optional) - {"name"})
    if unknown:
        raise ValueError(f"reward {kind!r}: unknown params {unknown}; allowed: {sorted({*required, *optional})}")
    missing = [key for key in required if key not in params]
    if missing:
        raise ValueError(f"reward {kind!r}: missing required params {missing}")


@REWARDS.register("string_check", label="string check", grader=True, sub=True, defaults={},
                  required=("input", "reference", "operation"))
def bind_string_check(params: Mapping[str, Any], models: GraderModels | None = None) -> GraderFn:
    """OpenAI grader: 1.0 when `input` eq / ne / like (contains) / ilike (contains, any case) `reference`."""
    check_fields("string_check", params)
    source = Template(params["input"], "reward 'string_check': param 'input'")
    reference = Template(params["reference"], "reward 'string_check': param 'reference'")
    operation = params["operation"]
    if operation not in OPERATIONS:
        raise ValueError(f"reward 'string_check': param 'operation' must be one of {list(OPERATIONS)}, "
                         f"got {operation!r}")

    def grade(prompt: str, response: str, meta: Mapping[str, Any]) -> float:
        got, want = source.render(response, meta, prompt), reference.render(response, meta, prompt)
        if operation == "eq":
            return float(got == want)
        if operation == "ne":
            return float(got != want)
        if operation == "ilike":
            got, want = got.casefold(), want.casefold()
        return float(want in got)

    return grade


def similarity(metric: str, text: str, reference: str) -> float:
    """The `metric` score of `text` against `reference`, in [0, 1]."""
    if metric == "fuzzy_match":
        from rapidfuzz import fuzz
        return float(fuzz.ratio(text, reference)) / 100.0
    if metric == "bleu":
        import sacrebleu
        return float(sacrebleu.sentence_bleu(text, [reference]).score) / 100.0
    from rouge_score import rouge_scorer
    kind = "rougeL" if metric == "rouge_l" else f"rouge{metric[-1]}"
    return float(rouge_scorer.RougeScorer([kind]).score(reference, text)[kind].fmeasure)


@REWARDS.register("text_similarity", label="text similarity", grader=True, sub=True,
                  defaults={"pass_threshold": None}, required=("input", "reference", "evaluation_metric"))
def bind_text_similarity(params: Mapping[str, Any], models: GraderModels | None = None) -> GraderFn:
    """OpenAI grader: fuzzy_match, bleu, rouge_1..rouge_5 or rouge_l of `input` against `reference`, in [0, 1]."""
    check_fields("text_similarity", params)
    source = Template(params["input"], "reward 'text_similarity': param 'input'")
    reference = Template(params["reference"], "reward 'text_similarity': param 'reference'")
    metric = params["evaluation_metric"]
    if metric in UNSUPPORTED_METRICS:
        raise ValueError(f"reward 'text_similarity': param 'evaluation_metric' {metric!r} is not supported here; "
                         f"use one of {list(METRICS)}")
    if metric not in METRICS:
        raise ValueError(f"reward 'text_similarity': param 'evaluation_metric' must be one of {list(METRICS)}, "
                         f"got {metric!r}")
    threshold = params.get("pass_threshold")
    numeric = isinstance(threshold, int | float) and not isinstance(threshold, bool)
    if threshold is not None and (not numeric or not 0.0 <= threshold <= 1.0):
        raise ValueError(f"reward 'text_similarity': param 'pass_threshold' must be a number in [0, 1], "
                         f"got {threshold!r}")

    def grade(prompt: str, response: str, meta: Mapping[str, Any]) -> float:
        return similarity(metric, source.render(response, meta, prompt), reference.render(response, meta, prompt))

    return grade


@REWARDS.register("multi", label="multi grader", grader=True, defaults={}, required=("graders", "calculate_output"))
def bind_multi(params: Mapping[str, Any], models: GraderModels | None = None) -> GraderFn:
    """OpenAI grader: `calculate_output`, a formula over the scores of the named sub-`graders`."""
    check_fields("multi", params)
    sub_graders = sub_grader_types()
    graders = params["graders"]
    if not isinstance(graders, Mapping) or not 1 <= len(graders) <= MAX_SUB_GRADERS:
        raise ValueError(f"reward 'multi': param 'graders' must map 1 to {MAX_SUB_GRADERS} names to graders")
    subs: dict[str, GraderFn] = {}
    for name, sub in graders.items():
        if not _NAME.fullmatch(name) or name == "reward" or name in FUNCTIONS:
            raise ValueError(f"reward 'multi': grader name {name!r} must be an identifier, not 'reward' or one of "
                             f"{sorted(FUNCTIONS)}")
        if not isinstance(sub, Mapping) or sub.get("type") not in sub_graders:
            got = sub.get("type") if isinstance(sub, Mapping) else sub
            raise ValueError(f"reward 'multi': graders.{name}.type must be one of {sorted(sub_graders)}, got {got!r}")
        fields = {key: value for key, value in sub.items() if key != "type"}
        try:
            subs[name] = REWARDS.get(sub["type"])(fields, models)
        except ValueError as exc:
            raise ValueError(f"reward 'multi': graders.{name}: {exc}") from None
    if not isinstance(params["calculate_output"], str):
        raise ValueError("reward 'multi': param 'calculate_output' must be a formula string")
    try:
        formula = Formula(params["calculate_output"], set(subs))
    except ValueError as exc:
        raise ValueError(f"reward 'multi': param 'calculate_output': {exc}") from None

    def many(items: Sequence[Item]) -> list[Any]:
        per_sub = {name: grade_many(fn, items) for name, fn in subs.items()}  # each sub-grader batched
        out: list[Any] = []
        for i in range(len(items)):
            failed = [(name, results[i]) for name, results in per_sub.items() if isinstance(results[i], Exception)]
            if failed:
                name, exc = failed[0]
                out.append(type(exc)(f"grader {name!r}: {exc.args[0] if exc.args else exc}"))
                continue
            try:
                scores = {name: float(results[i]) for name, results in per_sub.items()}
                out.append({"reward": formula.evaluate(scores), **scores})
            except SAMPLE_ERRORS as exc:
                out.append(exc)
        return out

    return BatchGrader(many)


def pass_threshold(kind: str, params: Mapping[str, Any]) -> float | None:
    """The score a sample needs to pass, where the grader declares one (its `pass_threshold`)."""
    value = params.get("pass_threshold") if REWARDS.entry(kind).meta.get("grader") else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def sub_grader_types() -> tuple[str, ...]:
    """The registered graders `multi` may nest."""
    return tuple(entry.name for entry in REWARDS.entries() if entry.meta.get("sub"))
