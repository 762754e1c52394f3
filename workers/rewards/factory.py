"""`build_reward(spec)`: a `RewardSpec` (contract/spec.py) becomes a callable `Reward`.

Built-ins run in-process; `composite` is the weighted sum of its components (each component's `weight`; component
names are their types, suffixed `#2`, `#3`... when repeated); `python` runs user code in a sandbox worker; the
model-backed graders (`model`, `judge`, also inside `multi`) call `models` (workers/rewards/grader_models.py) and
score a `score_many` batch in one call.
A component that errors makes the composite's outcome an error too (value 0.0), naming the component.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from contract.rewards.builtins import bind_builtin
from contract.rewards.graders import GraderModels, grade_many
from contract.rewards.validate import python_params, validate_reward_spec
from contract.spec import RewardSpec
from workers.rewards.base import Reward, RewardOutcome, RewardResultError, outcome_from_result
from workers.rewards.sandbox import PythonReward


class BuiltinReward(Reward):
    def __init__(self, name: str, fn: Callable[[str, str, Mapping[str, Any]], Any]):
        self.name, self.fn = name, fn

    def score(self, prompt: str, response: str, meta: Mapping[str, Any] | None = None) -> RewardOutcome:
        try:
            return outcome_from_result(self.fn(prompt, response, meta or {}))
        except (KeyError, ValueError, TypeError, RewardResultError) as exc:
            return self._failed(exc)

    def score_many(self, items: Iterable[tuple[str, str, Mapping[str, Any] | None]]) -> list[RewardOutcome]:
        results = grade_many(self.fn, [(prompt, response, meta or {}) for prompt, response, meta in items])
        outcomes = []
        for raw in results:
            try:
                outcomes.append(self._failed(raw) if isinstance(raw, Exception) else outcome_from_result(raw))
            except RewardResultError as exc:
                outcomes.append(self._failed(exc))
        return outcomes

    def _failed(self, exc: Exception) -> RewardOutcome:
        return RewardOutcome.failed(f"reward {self.name!r}: {exc.args[0] if exc.args else exc}")


class CompositeReward(Reward):
    name = "composite"

    def __init__(self, parts: list[tuple[str, float, Reward]]):
        assert parts, "a composite needs at least one component"
        self.parts = parts

    def score(self, prompt: str, response: str, meta: Mapping[str, Any] | None = None) -> RewardOutcome:
        outcomes = [(name, weight, part.score(prompt, response, meta)) for name, weight, part in self.parts]
        return self._combine(outcomes)

    def score_many(self, items: Iterable[tuple[str, str, Mapping[str, Any] | None]]) -> list[RewardOutcome]:
        batch = list(items)
        per_part = [(name, weight, part.score_many(batch)) for name, weight, part in self.parts]
        return [self._combine([(name, w, outs[i]) for name, w, outs in per_part]) for i in range(len(batch))]

    def score_each(self, items: Iterable[tuple[str, str, Mapping[str, Any] | None]],
                   cancel: threading.Event | None = None) -> Iterator[tuple[int, RewardOutcome]]:
        """A sample's outcome once every component scored it, or at its first component error (the later
        components then skip it); in-process components first, so a sandboxed one's outcomes complete samples as
        they come."""
        batch = list(items)
        got: list[dict[str, RewardOutcome]] = [{} for _ in batch]
        pending = list(range(len(batch)))
        for name, _, part in sorted(self.parts, key=lambda p: p[2].sandbox_mode is not None):
            finished: set[int] = set()
            for sub, outcome in part.score_each([batch[i] for i in pending], cancel):
                index = pending[sub]
                got[index][name] = outcome
                if outcome.error is not None or len(got[index]) == len(self.parts):
                    finished.add(index)
                    yield index, self._combine([(n, w, got[index][n]) for n, w, _ in self.parts if n in got[index]])
            if cancel is not None and cancel.is_set():
                return
            pending = [i for i in pending if i not in finished]

    @staticmethod
    def _combine(outcomes: list[tuple[str, float, RewardOutcome]]) -> RewardOutcome:
        errors = [f"{name}: {out.error}" for name, _, out in outcomes if out.error is not None]
        if errors:
            return RewardOutcome.failed("; ".join(errors))
        components = {name: out.value for name, _, out in outcomes}
        return RewardOutcome(value=sum(w * out.value for _, w, out in outcomes), components=components)

    @property
    def sandbox_mode(self) -> str | None:
        return next((part.sandbox_mode for _, _, part in self.parts if part.sandbox_mode is not None), None)

    def close(self) -> None:
        for _, _, part in self.parts:
            part.close()


def build_reward(spec: RewardSpec | Mapping[str, Any], models: GraderModels | None = None) -> Reward:
    """Build a reward. Raises ValueError naming the bad type or param (a user error, also reported at submit by
    `validate_reward_spec`), and SandboxUnavailable (workers/rewards/jail.py) for python code where it may not run.
    `models`: the backend of model-backed graders (without it their every sample is an error)."""
    return _build(validate_reward_spec(spec), models)


def _build(spec: RewardSpec, models: GraderModels | None) -> Reward:
    if spec.type == "python":
        assert spec.code is not None  # RewardSpec's validator guarantees it
        timeout_s, memory_mb = python_params(spec.params)
        return PythonReward(spec.code, timeout_s=timeout_s, memory_mb=memory_mb)
    if spec.type == "composite":
        parts: list[tuple[str, float, Reward]] = []
        seen: dict[str, int] = {}
        try:
            for child in spec.components:
                seen[child.type] = seen.get(child.type, 0) + 1
                name = child.type if seen[child.type] == 1 else f"{child.type}#{seen[child.type]}"
                parts.append((name, child.weight, _build(child, models)))
        except BaseException:
            for _, _, part in parts:
                part.close()
            raise
        return CompositeReward(parts)
    return BuiltinReward(spec.type, bind_builtin(spec.type, spec.params, models))
