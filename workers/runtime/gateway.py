"""The instance's side of the rollout gateway (docs/architecture.md#rollout-gateway; keys in contract/gateway.py).

A job with `environment.type: gateway` admits its prompts as any episode job does; instead of an environment's
reset, an admitted request opens a gateway episode (an id, an episode-scoped token, the dataset row as the task) that
an agent claims through the API. The agent's chat calls arrive on this instance's call list: each is rendered with
the model's chat template (the tools given to the template, or described in a system note as for built-in episodes),
sampled in the same continuous batch as every other turn on the weights loaded now, recorded (workers/core/gateway.py)
and answered on the call's reply list. A call that continues the previous one (its messages + the assistant message
as returned) gets the previous prompt ids + the sampled ids + the tokens of what the template adds, as built-in
episodes do, so re-tokenising the policy's own text never changes what it is trained on. The agent's
`POST .../reward` (or the episode timeout) ends the episode; the instance then assembles its calls and streams it
as one sample like any episode.

The engine's thread waits on no Redis round trip for a call: a receiver thread blocks on the call and ended lists
(BLMPOP) and hands what arrives to `poll`, and a sender thread answers the calls `complete` finished, each batch in
one pipeline. Both waits used to sit between decode steps (a poll per step, a reply per finished call): on a loaded
2-core host bench/gateway.py's engine thread spent 1.8 ms per poll and 2.9 ms per reply there, against 4.5 ms per
decode step.

With `JobSpec.agent` the platform starts the agent itself (`agents`, workers/runtime/remote_agent.py `AgentRuns`):
the episode is never offered to the claim API; its agent gets the task, the episode's base URL and token, and its
end (a reward, nothing, or a failure) ends the episode. Past `agent.timeout_s` from its start the episode fails.
An agent whose jail died (killed, OOM-killed, crashed: `AgentDone.lost`, not the agent's own error or timeout) has
its episode retried from a clean start, up to MAX_EPISODE_RETRIES times, as episodes whose OpenEnv server was lost
are: the retry is a new gateway episode (`episode_id_of(job, sample, attempt)`, a new token), the lost attempt's
episode is ended (a late call of the dead agent is refused, never taken as the retry's), and its recorded calls
are dropped from the sample (they stay in the job's `recorded` list under the lost attempt's id). A job event says so.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import redis

from contract import gateway as keys
from contract.sample import PromptRequest
from contract.spec import EnvironmentSpec
from workers.core.episode import MAX_EPISODE_RETRIES, SENTINEL, Episode, parse_tool_calls
from workers.core.gateway import Call, Choice, assemble, oldest_version, render_call, to_episode
from workers.generation.engine import GenerationRequest, GenerationResult, SamplingParams
from workers.runtime.remote_agent import AgentRuns, AgentTask

SWEEP_S = 0.1  # episode and agent timeouts are looked for at most this often
RECEIVE_BLOCK_S = 0.5  # the receiver's blocking pop (it stops within this after `close`)
POP_COUNT = 64  # calls (or ended episodes) taken per round trip


@dataclass
class Live:
    request: PromptRequest
    token: str
    opened_at: float
    calls: list[Call] = field(default_factory=list)
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)  # call id -> {call, results, tools}
    attempt: int = 0  # retries after its agent's jail was lost


@dataclass
class Finished:
    episode: Episode
    version: int
    sequences: int


class GatewayEpisodes:
    def __init__(self, client: redis.Redis, job_id: int, instance_id: str, tokenizer: Any, spec: EnvironmentSpec,
                 sampling: SamplingParams, agents: AgentRuns | None = None):
        """`agents`: the job's agent, started per episode; None: agents claim the episodes through the API."""
        self.redis, self.job_id, self.instance_id, self.agents = client, job_id, instance_id, agents
        self.tokenizer, self.spec, self.sampling = tokenizer, spec, sampling
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("gateway episodes need a model whose tokenizer has a chat template")
        self.live: dict[str, Live] = {}  # episode id -> its state
        self.by_sample: dict[str, str] = {}  # sample id -> episode id
        self.calls_of: dict[str, str] = {}  # generation request id -> episode id
        self._swept = 0.0
        self._notes: list[str] = []  # for the job's events (an episode retried), taken by `take_notes`
        # the receiver's pops ("calls" | "ended", raw items) for `poll`, and the sender's (call id, reply, record)
        self._inbox: deque[tuple[str, list[Any]]] = deque()
        self._outbox: deque[tuple[str, dict[str, Any], dict[str, Any] | None]] = deque()
        self._wake = threading.Condition()
        self._closed = threading.Event()
        self._receiver: threading.Thread | None = None
        self._sender: threading.Thread | None = None

    # -- episodes -----------------------------------------------------------------------------------------------------
    def open(self, request: PromptRequest, attempt: int = 0) -> str:
        episode_id = keys.episode_id_of(self.job_id, request.sample_id, attempt)
        token = keys.new_token()
        task = {"prompt": request.prompt_text, **request.meta}
        pipe = self.redis.pipeline()
        pipe.delete(keys.episode(episode_id))  # a sample dispatched again (its instance died) starts a clean episode
        pipe.hset(keys.episode(episode_id), mapping={
            "job": self.job_id, "instance": self.instance_id, "token_sha": keys.token_sha(token),
            "task": json.dumps(task), "state": "open" if self.agents is None else "claimed", "token": token})
        pipe.expire(keys.episode(episode_id), keys.EPISODE_TTL_S)
        if self.agents is None:  # offered to the claim API; the job's own agent is started instead
            pipe.lpush(keys.open_episodes(self.job_id), episode_id)
        pipe.execute()
        self.live[episode_id] = Live(request, token, time.time(), attempt=attempt)
        self.by_sample[request.sample_id] = episode_id
        if self.agents is not None:
            self.agents.start(AgentTask(episode_id, task, f"{self.agents.base_url}/rollouts/{episode_id}/v1", token))
        return episode_id

    def poll(self, version: int, force: bool = False) -> tuple[list[GenerationRequest], list[Finished]]:
        """New calls as generation requests; ended (or timed-out) episodes. What the receiver thread took from Redis
        (started by the first unforced poll); `force`: also read Redis now, in this thread."""
        if not self.live:
            return [], []
        if self._receiver is None and not force:
            self._start_receiver()
        raw_calls: list[Any] = []
        raw_ended: list[Any] = []
        while self._inbox:
            kind, items = self._inbox.popleft()
            (raw_calls if kind == "calls" else raw_ended).extend(items)
        if force:
            pipe = self.redis.pipeline()
            pipe.rpop(keys.calls(self.job_id, self.instance_id), POP_COUNT)
            pipe.rpop(keys.ended(self.job_id, self.instance_id), POP_COUNT)
            got_calls, got_ended = pipe.execute()
            raw_calls += got_calls or []
            raw_ended += got_ended or []
        requests: list[GenerationRequest] = []
        for raw in raw_calls:
            requests += self._call(json.loads(raw), version)
        finished = [self._end(str(e if isinstance(e, str) else e.decode()), None) for e in raw_ended]
        finished += self._agents_ended()
        now = time.monotonic()
        if not force and now - self._swept < SWEEP_S:
            return requests, [f for f in finished if f is not None]
        self._swept = now
        wall = time.time()
        for episode_id, live in list(self.live.items()):
            if wall - live.opened_at > self.spec.episode_timeout_s and not live.pending:
                finished.append(self._end(episode_id, f"gateway episode {episode_id}: no reward within "
                                          f"episode_timeout_s={self.spec.episode_timeout_s:g}"))
                continue
            since = None if self.agents is None else self.agents.running_since(episode_id)
            if since is not None and self.agents is not None and now - since > self.agents.timeout_s \
                    and not live.pending:
                finished.append(self._end(episode_id, f"gateway episode {episode_id}: its agent did not finish "
                                          f"within agent.timeout_s={self.agents.timeout_s:g}"))
        return requests, [f for f in finished if f is not None]

    def take_notes(self) -> list[str]:
        """What the job's events should say since the last call (episodes retried after their agent's jail died)."""
        notes, self._notes = self._notes, []
        return notes

    def close(self) -> None:
        """Stop the agents and the receiver; the sender answers what is queued, then stops."""
        self._closed.set()
        with self._wake:
            self._wake.notify_all()
        for thread in (self._receiver, self._sender):
            if thread is not None:
                thread.join(timeout=RECEIVE_BLOCK_S + 5)
        if self.agents is not None:
            self.agents.close()

    # -- the Redis side, off the engine's thread ----------------------------------------------------------------------
    def _start_receiver(self) -> None:
        self._receiver = threading.Thread(target=self._receive, name=f"gateway-receive-{self.instance_id}",
                                          daemon=True)
        self._receiver.start()

    def _receive(self) -> None:
        """Block on the call and ended lists (each first in turn, so neither starves the other) and queue what
        arrives for `poll`."""
        lists = {keys.calls(self.job_id, self.instance_id): "calls", keys.ended(self.job_id, self.instance_id): "ended"}
        order = list(lists)
        while not self._closed.is_set():
            try:
                got = self.redis.blmpop(RECEIVE_BLOCK_S, len(order), *order, direction="RIGHT", count=POP_COUNT)
            except redis.RedisError:
                if self._closed.wait(RECEIVE_BLOCK_S):  # Redis away: the instance's own loop reports it
                    return
                continue
            if got:
                key, items = got  # [list name, [items]]
                name = key.decode() if isinstance(key, bytes) else str(key)
                self._inbox.append((lists[name], list(items)))
            order.reverse()

    def _send(self) -> None:
        """Answer the queued calls, everything queued in one pipeline; while Redis is away, try again (at shutdown
        the rest is dropped: those agents get the API's 504)."""
        while True:
            with self._wake:
                while not self._outbox and not self._closed.is_set():
                    self._wake.wait()
            batch = []
            while self._outbox:
                batch.append(self._outbox.popleft())
            if batch:
                try:
                    self._write(batch)
                except redis.RedisError:
                    if self._closed.is_set():
                        return
                    self._outbox.extendleft(reversed(batch))
                    self._closed.wait(RECEIVE_BLOCK_S)
                    continue
            if self._closed.is_set() and not self._outbox:
                return

    def _write(self, batch: list[tuple[str, dict[str, Any], dict[str, Any] | None]]) -> None:
        pipe = self.redis.pipeline(transaction=False)  # one round trip, no MULTI/EXEC: each reply key is its call's
        recorded = keys.recorded(self.job_id)
        records = [json.dumps(record) for _, _, record in batch if record is not None]
        if records:
            pipe.lpush(recorded, *records)
            pipe.ltrim(recorded, 0, keys.RECORDED_CALLS - 1)
            pipe.expire(recorded, keys.EPISODE_TTL_S)
        for call_id, body, _ in batch:
            pipe.lpush(keys.reply(call_id), json.dumps(body))
            pipe.expire(keys.reply(call_id), keys.REPLY_TTL_S)
        pipe.execute()

    def _agents_ended(self) -> list[Finished | None]:
        """Episodes whose agent returned: its answered reward (a reward it posted to the endpoint stands), or its
        failure as the episode's error."""
        if self.agents is None:
            return []
        out = []
        for done in self.agents.finished():
            live = self.live.get(done.episode)
            if live is None:
                continue  # ended already (its reward posted, or timed out)
            if done.lost and live.attempt < MAX_EPISODE_RETRIES:
                self._retry(done.episode, done.error or "the agent's jail was lost")
                continue
            if done.error is None and done.reward is not None:
                self.redis.hsetnx(keys.episode(done.episode), "reward", json.dumps(done.reward))
            error = None if done.error is None else f"gateway episode {done.episode}: {done.error}"
            if error is not None and done.lost:
                error += f" (after {live.attempt} retries of the episode)"
            out.append(self._end(done.episode, error))
        return out

    def _retry(self, episode_id: str, why: str) -> None:
        """The episode's agent lost its jail: end that attempt (its calls discarded, untrained) and open the episode
        again as a new gateway episode with a new token, its agent started afresh."""
        live = self.live.pop(episode_id)
        del self.by_sample[live.request.sample_id]
        self.redis.hset(keys.episode(episode_id), "state", "ended")  # the dead attempt's late calls get a 409
        retry = self.open(live.request, live.attempt + 1)
        self._notes.append(f"gateway episode {episode_id}: its agent was lost ({why[:300]}); retried from a "
                           f"clean start as {retry} (retry {live.attempt + 1} of {MAX_EPISODE_RETRIES}), the lost "
                           f"attempt's {len(live.calls)} recorded calls discarded, not trained")

    def _reply(self, call_id: str, body: dict[str, Any], record: dict[str, Any] | None = None) -> None:
        """Answer a call (by the sender thread); `record`: the answered call as recorded, kept in the job's `recorded`
        list (bounded; pushed before its reply)."""
        if self._sender is None:
            self._sender = threading.Thread(target=self._send, name=f"gateway-send-{self.instance_id}", daemon=True)
            self._sender.start()
        self._outbox.append((call_id, body, record))
        with self._wake:
            self._wake.notify()

    def _render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                generation_prompt: bool = True) -> str:
        return render_call(self.tokenizer, messages, tools, generation_prompt)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _continued(self, live: Live, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                   text: str) -> list[int] | None:
        """The prompt ids of a call that continues the previous one (its messages, then one of its choices as the
        assistant message, same tools): the previous prompt ids + that choice's sampled ids + the template's
        rendering of what follows, tokenised, so the policy sees exactly the tokens it sampled (no re-tokenisation
        of its own text). None: the agent rewrote its history (the call is rendered and tokenised whole)."""
        if not live.calls:
            return None
        before = live.calls[-1]
        size = len(before.messages)
        if tools != before.tools or len(messages) <= size or messages[:size] != before.messages:
            return None
        sent = messages[size]
        choice = next((c for c in before.choices if sent.get("role") == "assistant"
                       and (sent.get("content") or "") == c.text), None)
        if choice is None:
            return None
        try:
            without = self._render(messages[:size + 1], tools, generation_prompt=False)
            marked = self._render([*before.messages, {**sent, "content": SENTINEL}], tools, generation_prompt=False)
        except Exception:  # noqa: BLE001 - not renderable piecewise: the whole rendering stands
            return None
        at = marked.rfind(SENTINEL)
        if at < 0 or not text.startswith(without):
            return None
        closing = marked[at + len(SENTINEL):]  # the template's markup after the content, the policy's EOS included
        raw = self.tokenizer.decode(choice.ids, skip_special_tokens=False)
        for k in range(len(closing), 0, -1):
            if raw.endswith(closing[:k]):
                closing = closing[k:]
                break
        return [*before.prompt_ids, *choice.ids, *self._encode(closing + text[len(without):])]

    def _call(self, message: dict[str, Any], version: int) -> list[GenerationRequest]:
        call_id, episode_id, body = message["call"], message["episode"], message["body"]
        live = self.live.get(episode_id)
        if live is None:
            self._reply(call_id, {"error": f"episode {episode_id} is over", "status": 409})
            return []
        if len(live.calls) + len(live.pending) >= self.spec.max_turns:
            self._reply(call_id, {"error": f"episode {episode_id} reached environment.max_turns="
                                  f"{self.spec.max_turns} calls", "status": 400})
            return []
        try:
            text = self._render(list(body["messages"]), body.get("tools"))
        except Exception as exc:  # noqa: BLE001 - the agent's messages: its error, not the instance's
            self._reply(call_id, {"error": f"messages: the chat template cannot render them: {exc}"[:500],
                                  "status": 400})
            return []
        ids = self._continued(live, list(body["messages"]), body.get("tools"), text) or self._encode(text)
        used = len(ids) - len(live.calls[0].prompt_ids) if live.calls else 0
        left = self.spec.max_episode_tokens - used
        if left <= 0:
            self._reply(call_id, {"error": f"episode {episode_id} reached environment.max_episode_tokens="
                                  f"{self.spec.max_episode_tokens}", "status": 400})
            return []
        n = int(body.get("n") or 1)
        seed = body.get("seed")
        stop = body.get("stop") or []
        sampling = dataclasses.replace(
            self.sampling, max_tokens=min(int(body.get("max_tokens") or self.sampling.max_tokens), left),
            temperature=self.sampling.temperature if body.get("temperature") is None else float(body["temperature"]),
            top_p=self.sampling.top_p if body.get("top_p") is None else float(body["top_p"]),
            stop=tuple([stop] if isinstance(stop, str) else stop))
        recorded = Call(list(body["messages"]), text, ids, version, tools=body.get("tools"))
        live.pending[call_id] = {"call": recorded, "results": {}, "n": n}
        out = []
        for k in range(n):
            request_id = f"{call_id}#{k}"
            self.calls_of[request_id] = episode_id
            out.append(GenerationRequest(request_id=request_id, prompt_ids=list(ids), meta={},
                                         sampling=dataclasses.replace(
                                             sampling, seed=None if seed is None else (int(seed) + k) & 0x7FFFFFFF)))
        return out

    def complete(self, result: GenerationResult) -> bool:
        """Record a sampled choice (False: not a gateway call); when all of a call's choices are in, answer it."""
        episode_id = self.calls_of.pop(result.request_id, None)
        if episode_id is None:
            return False
        live = self.live.get(episode_id)
        call_id, _, k = result.request_id.rpartition("#")
        if live is None or call_id not in live.pending:
            return True
        pending = live.pending[call_id]
        calls, _ = parse_tool_calls(result.text, len(live.calls))
        for tool in calls:  # OpenAI's wire form: arguments as a JSON string
            tool["function"]["arguments"] = json.dumps(tool["function"]["arguments"])
        pending["results"][int(k)] = Choice(list(result.response_ids), list(result.logprobs), result.text,
                                            result.finish_reason, calls)
        if len(pending["results"]) < pending["n"]:
            return True
        del live.pending[call_id]
        call: Call = pending["call"]
        call.choices = [pending["results"][i] for i in range(pending["n"])]
        live.calls.append(call)
        self._reply(call_id, {"prompt_token_ids": call.prompt_ids, "prompt_text": call.prompt_text,
                              "version": call.version,
                              "choices": [{"token_ids": c.ids, "logprobs": c.logprobs, "text": c.text,
                                           "finish_reason": "tool_calls" if c.tool_calls else c.finish_reason,
                                           "tool_calls": c.tool_calls} for c in call.choices]},
                    call.record(episode_id))
        return True

    def _end(self, episode_id: str, error: str | None) -> Finished | None:
        live = self.live.pop(episode_id, None)
        if live is None:
            return None
        del self.by_sample[live.request.sample_id]
        state = self.redis.hgetall(keys.episode(episode_id))
        self.redis.hset(keys.episode(episode_id), "state", "ended")
        self.redis.lrem(keys.open_episodes(self.job_id), 0, episode_id)
        raw = state.get(b"reward") or state.get("reward")
        reward = json.loads(raw) if raw else None
        now = time.time()
        sequences = assemble(live.calls)
        if not sequences:
            episode = Episode(request=live.request, row={}, started_at=live.opened_at, finished_at=now, end="error",
                              error=error or f"gateway episode {episode_id}: ended before any chat call")
            return Finished(episode, 0, 0)
        last = sequences[-1]
        episode = to_episode(live.request, last, started_at=live.opened_at, finished_at=now)
        if error is not None:
            episode.error, episode.end = error, "error"
        if reward is not None:
            episode.turn_rewards[-1] = float(reward)
        return Finished(episode, oldest_version(last), len(sequences))
