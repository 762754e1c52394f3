"""Token fidelity of a finished gateway job (issue 38), for the gateway tests (test_rollout_gateway.py,
test_agent_code_job.py): over every call the instance recorded (contract/gateway.py `recorded_calls`),

- the recorded prompt ids are the chat template's re-rendering of the call's messages and tools (rendered as the
  gateway renders: the tools given to a template that takes them, else described in a system note), tokenised. A
  call continuing its episode's previous call keeps that call's prompt ids + its sampled ids (never re-tokenised):
  there the rendering must start with their text, and every id after them must be the rest of the rendering,
  tokenised. `retokenised` counts the calls whose ids are also the whole rendering tokenised in one piece (fewer
  when the policy sampled a token split that the tokenizer would not produce: kept as sampled, by design);
- every trained token (loss mask 1) of every stored sample is a recorded sampled completion token of its episode
  (of its last attempt, for an episode retried after its agent was lost), in order, with that token's recorded
  behaviour logprob (the trace keeps 4 decimals).

`fidelity(...)` returns the counts; the tests assert 100% and print `Fidelity.line()`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runtime_platform import Platform

from contract import gateway as keys
from workers.core.gateway import render_call


@dataclass
class Fidelity:
    calls: int = 0
    reproduced: int = 0
    retokenised: int = 0
    continuing: int = 0  # calls that extend their episode's previous call (multi-turn)
    samples: int = 0
    trained_tokens: int = 0
    with_logprob: int = 0

    def line(self) -> str:
        return (f"TOKEN_FIDELITY calls={self.calls} reproduced={self.reproduced} trained_tokens={self.trained_tokens} "
                f"with_logprob={self.with_logprob} (continuing calls {self.continuing}, whole-prompt re-tokenisation "
                f"equal {self.retokenised}/{self.calls}, samples {self.samples})")

    def assert_complete(self) -> None:
        assert self.calls > 0 and self.reproduced == self.calls, self.line()
        assert self.trained_tokens > 0 and self.with_logprob == self.trained_tokens, self.line()


def model_dir(platform: Platform) -> str:
    """Where the platform's model (the tokenizer the gateway renders with) is."""
    from sqlalchemy import select

    from backend.db.models import Model

    with platform.backend.session() as session:
        return str(session.scalar(select(Model.path).where(Model.team_id == platform.team.id, Model.name == "tiny")))


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _inherited(before: dict[str, Any] | None, call: dict[str, Any]) -> tuple[list[int], int] | None:
    """The previous call's prompt ids + the sampled ids of the choice this call continues, if its prompt starts so."""
    if before is None:
        return None
    for index, choice in enumerate(before["choices"]):
        head = before["prompt_ids"] + choice["ids"]
        if call["prompt_ids"][:len(head)] == head:
            return head, index
    return None


def reproduced(tokenizer: Any, before: dict[str, Any] | None, call: dict[str, Any]) -> tuple[bool, bool]:
    """(the recorded prompt ids are the re-rendering as the gateway builds them, they are it tokenised whole)."""
    text = render_call(tokenizer, call["messages"], call["tools"])  # as the gateway renders it
    whole = _encode(tokenizer, text)
    inherited = _inherited(before, call)
    if inherited is None:
        return call["prompt_ids"] == whole, call["prompt_ids"] == whole
    head = inherited[0]
    said = tokenizer.decode(head, skip_special_tokens=False)
    ok = text.startswith(said) and call["prompt_ids"] == head + _encode(tokenizer, text[len(said):])
    return ok, call["prompt_ids"] == whole


def trained_sequence(calls: list[dict[str, Any]]) -> list[tuple[dict[str, Any], int]]:
    """The calls of an episode's last sequence (the one a gateway episode trains) with the choice each continues
    with (the last call's: 0)."""
    out = [(calls[-1], 0)]
    for index in range(len(calls) - 1, 0, -1):
        inherited = _inherited(calls[index - 1], calls[index])
        if inherited is None:
            break
        out.insert(0, (calls[index - 1], inherited[1]))
    return out


def trained_attempt(by_episode: dict[str, list[dict[str, Any]]], first: str) -> list[dict[str, Any]]:
    """The recorded calls of the attempt a sample trains: an episode retried after its agent was lost (`~attempt` on
    its id, contract/gateway.py) trains its last attempt's calls, never an abandoned one's."""
    attempts = {keys.attempt_of(episode)[1]: calls for episode, calls in by_episode.items()
                if keys.attempt_of(episode)[0] == first}
    return attempts[max(attempts)] if attempts else []


def fidelity(platform: Platform, job_id: int, tokenizer: Any) -> Fidelity:
    recorded = keys.recorded_calls(platform.client, job_id)
    assert len(recorded) < keys.RECORDED_CALLS, "the job made more calls than are kept: not every call is checked"
    by_episode: dict[str, list[dict[str, Any]]] = {}
    for call in recorded:
        by_episode.setdefault(call["episode"], []).append(call)
    out = Fidelity()
    for calls in by_episode.values():
        for index, call in enumerate(calls):
            before = calls[index - 1] if index else None
            exact, whole = reproduced(tokenizer, before, call)
            out.calls += 1
            out.reproduced += exact
            out.retokenised += whole
            out.continuing += _inherited(before, call) is not None

    headers = platform.backend.auth_headers(platform.user, platform.team)
    with platform.backend.client() as api:
        samples = api.get(f"/api/v1/jobs/{job_id}/samples", params={"limit": 1000}, headers=headers).json()["data"]
        for sample in samples:
            response = api.get(f"/api/v1/jobs/{job_id}/samples/{sample['sample_id']}/tokens", headers=headers)
            if response.status_code == 404 and sample["length"] == 0:
                continue  # an episode that failed before any call: no token to train
            assert response.status_code == 200, response.text
            trace = response.json()
            mask = trace["loss_mask"] if trace["loss_mask"] is not None else [1] * len(trace["pieces"])
            trained = [i for i, m in enumerate(mask) if m]
            calls = trained_attempt(by_episode, keys.episode_id_of(job_id, sample["sample_id"]))
            out.samples += 1
            if not trained:
                continue
            assert calls, f"sample {sample['sample_id']}: no recorded call of its episode"
            sampled = [(t, lp) for call, k in trained_sequence(calls)
                       for t, lp in zip(call["choices"][k]["ids"], call["choices"][k]["logprobs"], strict=True)]
            out.trained_tokens += len(trained)
            for position, (token, logprob) in zip(trained, sampled, strict=False):
                behaviour = trace["behaviour"][position]
                out.with_logprob += (trace["pieces"][position] == tokenizer.decode([token], skip_special_tokens=False)
                                     and behaviour is not None and abs(behaviour - round(logprob, 4)) < 1e-4)
            assert len(trained) == len(sampled), (sample["sample_id"], len(trained), len(sampled))
    return out
