"""Run one reward spec on one sample (POST /graders/run), and check the models a reward's graders name.

Pure text rewards (built-ins and graders, also inside composites) run here in the control plane. A spec with a
model-backed grader (`model`, `judge`, also inside `multi` or a composite) runs on the generation pool, where the
models are: the task `generation.run_grader` (contract/tasks.py RUN_GRADER; workers/rewards/grader_run.py) scores
the sample with the models' directories as resolved here and pushes the result to a reply key read only by this
request; no generation worker registered is a 503, no answer within `timeout_s` a 504. python rewards run user code,
which only the sandboxed workers do (refused here).

`grader_models` is the submit-time check of every model a reward names (registered in the team, ready, of the kind
its grader needs: a `...ForSequenceClassification` reward model for `model`, a causal LM with a chat template for
`judge`); its 422 names the field (e.g. body.reward.params.graders.judge.model).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

import redis
from sqlalchemy.orm import Session

from backend.db.models import Model
from backend.schemas.graders import GraderRunRequest, GraderRunResult
from backend.services.errors import InvalidInput, ServiceError
from backend.services.inference import generation_workers, redis_url_of
from backend.services.models import find_model
from contract import keys, tasks
from contract.rewards import validate_reward_spec
from contract.rewards.builtins import bind_builtin
from contract.rewards.graders import pass_threshold
from contract.rewards.model_graders import KINDS, model_refs
from contract.spec import RewardSpec

RUN_TIMEOUT_S = 120.0  # a free generation slot, loading the models, scoring
POLL_S = 1  # longest single wait on the reply key
_apps: dict[str, Any] = {}
_apps_lock = threading.Lock()


class GraderUnavailable(ServiceError):
    """503: no generation worker to run a model-backed grader; 504 (`status_code`) when none answered in time."""

    status_code = 503

    def __init__(self, detail: str, status_code: int = 503):
        super().__init__(detail)
        self.status_code = status_code


def is_reward_model(card: Mapping[str, Any] | None) -> bool:
    return str((card or {}).get("architecture") or "").endswith("ForSequenceClassification")


def _kind_problem(kind: str, model: Model) -> str | None:
    if KINDS[kind] == "classifier":
        if not is_reward_model(model.card):
            architecture = (model.card or {}).get("architecture") or "unknown architecture"
            return f"is a {architecture}, not a sequence-classification reward model (`...ForSequenceClassification`)"
        return None
    if is_reward_model(model.card):
        return "is a sequence-classification reward model, not a chat model (use it with type `model`)"
    if (model.card or {}).get("chat_template") is False:
        return "has no chat template (tokenizer_config.json `chat_template` or chat_template.jinja)"
    return None


def grader_models(session: Session, team_id: int, reward: RewardSpec, loc: tuple[str | int, ...]) -> dict[str, str]:
    """name -> directory of every model `reward`'s graders name; InvalidInput at `loc` + the field's path when one
    is not registered in the team, not ready, or of the wrong kind."""
    dirs: dict[str, str] = {}
    for path, kind, name in model_refs(reward):
        where = (*loc, *path[1:])  # path starts at "reward"
        model = find_model(session=session, team_id=team_id, name=name)
        if model is None:
            raise InvalidInput(f"reward {kind!r}: model {name!r} is not registered for this team (POST /models)",
                               loc=where)
        if model.state != "ready":
            why = f": {model.error}" if model.state == "failed" and model.error else " (wait until it is ready)"
            raise InvalidInput(f"reward {kind!r}: model {name!r} is {model.state}, not ready{why}", loc=where)
        problem = _kind_problem(kind, model)
        if problem is not None:
            raise InvalidInput(f"reward {kind!r}: model {name!r} {problem}", loc=where)
        dirs[name] = model.path
    return dirs


def _score(spec: RewardSpec, prompt: str, response: str, item: Mapping[str, Any]) -> tuple[float, dict[str, float]]:
    """(value, sub-scores); KeyError/ValueError/TypeError for a sample the spec cannot grade."""
    if spec.type == "composite":  # named as workers/rewards/factory.py names them: type, then type#2, type#3...
        parts: dict[str, float] = {}
        total, seen = 0.0, dict[str, int]()
        for child in spec.components:
            seen[child.type] = seen.get(child.type, 0) + 1
            name = child.type if seen[child.type] == 1 else f"{child.type}#{seen[child.type]}"
            parts[name] = _score(child, prompt, response, item)[0]
            total += child.weight * parts[name]
        return total, parts
    raw = bind_builtin(spec.type, spec.params)(prompt, response, item)
    if isinstance(raw, dict):
        return float(raw["reward"]), {key: float(value) for key, value in raw.items() if key != "reward"}
    return float(raw), {}


def _has_python(spec: RewardSpec) -> bool:
    return spec.type == "python" or any(_has_python(child) for child in spec.components)


def send_grader_task(client: redis.Redis, request_id: str, payload: dict[str, Any]) -> None:
    """Queue `generation.run_grader` on the platform's broker (the Redis `client` talks to)."""
    url = redis_url_of(client)
    with _apps_lock:
        if url not in _apps:
            _apps[url] = tasks.make_celery(url)
        app = _apps[url]
    app.send_task(tasks.RUN_GRADER, args=[request_id, payload])


def _on_pool(client: redis.Redis | None, payload: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    if client is None or generation_workers(client) == 0:
        raise GraderUnavailable("model graders run on the generation pool, and no generation worker is registered")
    request_id = uuid.uuid4().hex
    send_grader_task(client, request_id, payload)
    deadline, reply = time.monotonic() + timeout_s, None
    while reply is None and time.monotonic() < deadline:  # short waits: the client's socket timeout may be shorter
        reply = client.blpop([keys.grader_reply(request_id)], timeout=POLL_S)
    if reply is None:
        raise GraderUnavailable(f"no generation worker ran the grader within {timeout_s:g} s (every slot busy with "
                                f"jobs, or the models still loading); try again", status_code=504)
    result: dict[str, Any] = json.loads(reply[1])
    return result


def run_grader(body: GraderRunRequest, *, session: Session | None = None, team_id: int | None = None,
               client: redis.Redis | None = None, timeout_s: float = RUN_TIMEOUT_S) -> GraderRunResult:
    """The result; ValueError (a 422 at body.grader) for an invalid spec or one that needs the sandbox, InvalidInput
    naming the field for a model the team cannot use, GraderUnavailable when the pool cannot run it."""
    spec = validate_reward_spec(body.grader)
    if _has_python(spec):
        raise ValueError("python rewards run only in the sandboxed workers; test them with `streamrl train-local`")
    threshold = pass_threshold(spec.type, spec.params)
    if model_refs(spec):
        assert session is not None and team_id is not None, "model graders need the caller's team"
        models = grader_models(session, team_id, spec, ("body", "grader"))
        result = _on_pool(client, {"spec": spec.model_dump(mode="json"), "models": models, "prompt": body.prompt,
                                   "output_text": body.sample.output_text, "item": body.item}, timeout_s)
        value = float(result["reward"])
        passed = None if threshold is None or result["error"] is not None else value >= threshold
        return GraderRunResult(reward=value, sub_rewards=result["sub_rewards"], passed=passed, error=result["error"])
    try:
        value, subs = _score(spec, body.prompt, body.sample.output_text, body.item)
    except (KeyError, ValueError, TypeError, OverflowError) as exc:
        return GraderRunResult(reward=0.0, sub_rewards={}, passed=None, error=str(exc.args[0] if exc.args else exc))
    return GraderRunResult(reward=value, sub_rewards=subs, passed=None if threshold is None else value >= threshold,
                           error=None)
