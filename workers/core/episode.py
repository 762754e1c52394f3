"""The episode loop: multi-turn, tool-using episodes as ONE sample each (docs/user-guide.md#environments-and-tools).

    runner = EpisodeRunner(env, tokenizer, spec)         # one per generation instance (or colocated source)
    episode, first = runner.start(request)                # env.reset(row) -> the opening prompt; first turn's request
    next = runner.advance(episode, result)                # after each generated turn: parse tool calls, env.step,
                                                          # append its messages; None when the episode is over
    sample = runner.to_sample(episode, ...)               # prompt = the opening; response = everything after it

Tokens are built incrementally, so every turn's prompt is exactly the tokens before it (policy tokens as generated,
never re-tokenised): the policy's tokens get loss mask 1 and their behaviour logprobs; what the environment adds
(the chat markup closing the assistant turn that the policy did not generate, the environment's messages, the next
generation prompt) is rendered with the model's chat template as the text between the conversation without and with
those messages, tokenised, and gets loss mask 0 (logprob 0.0). An episode ends when the environment says `done`, at
`max_turns` policy turns, or when the next tokens would pass `max_episode_tokens` (the response never exceeds it).

Tool calls, for the tiny BPE chat presets and any template: the policy writes
`<tool_call>{"name": "calculate", "arguments": {"expression": "3 * 4"}}</tool_call>` (one block per call; the
arguments may also be a JSON string); the assistant message the environment sees carries them as OpenAI-style
`tool_calls`. A template that takes `tools` gets them; for one that does not, they are described in a system message.
A failing environment (workers/environments/base.py `EnvironmentFailure`) ends the episode with `reward_error`; a
lost one (`EnvironmentLost`: a remote server that went away mid-episode) starts the episode over from its reset, up
to `MAX_EPISODE_RETRIES` times (its tokens so far are dropped: they continued a conversation that no longer exists).

The episode's reward is the sum of its steps' rewards plus, when the job has an `environment.grader`, the grader's
score of the final answer (the last assistant message), scored for a batch of episodes at once (`grade_episodes`).
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from contract.environments import Message
from contract.prompt_rows import with_system_prompt
from contract.sample import PromptRequest, Sample
from contract.spec import EnvironmentSpec
from workers.core.sample import build_sample
from workers.environments.base import Environment, EnvironmentFailure, EnvironmentLost
from workers.generation.engine import GenerationEngine, GenerationRequest, GenerationResult, SamplingParams
from workers.rewards import Reward, RewardOutcome

MAX_EPISODE_RETRIES = 3  # restarts of one episode whose environment was lost
TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
SENTINEL = "\x00STREAMRL-CONTENT\x00"
TOOLS_SYSTEM = ("You can call tools. To call one, write <tool_call>{{\"name\": NAME, \"arguments\": {{...}}}}"
                "</tool_call> and wait for its result. Tools:\n{tools}")


def describe_tools(tools: list[dict[str, Any]]) -> str:
    """One line per tool, `name(arg: type, optional?: type): description`: the tools note of a template without
    `tools` (a JSON schema dump would be several times longer, and every episode's prompt carries it)."""
    def field(obj: Any, key: str, kind: type) -> Any:  # user TOOLS are checked as dicts only: read defensively
        value = obj.get(key) if isinstance(obj, dict) else None
        return value if isinstance(value, kind) else kind()

    lines = []
    for tool in tools:
        fn = field(tool, "function", dict) or tool
        params = field(fn, "parameters", dict)
        required = {str(r) for r in field(params, "required", list)}
        args = ", ".join(f"{name}{'' if name in required else '?'}: {field(spec, 'type', str) or 'any'}"
                         for name, spec in field(params, "properties", dict).items())
        description = field(fn, "description", str)
        lines.append(f"- {field(fn, 'name', str) or '?'}({args}){': ' + description if description else ''}")
    return "\n".join(lines)


def parse_tool_calls(text: str, turn: int) -> tuple[list[dict[str, Any]], list[str]]:
    """OpenAI-style tool calls from `<tool_call>{json}</tool_call>` blocks, and what was wrong with the others."""
    calls: list[dict[str, Any]] = []
    errors: list[str] = []
    for index, body in enumerate(TOOL_CALL.findall(text)):
        try:
            raw = json.loads(body)
            name, arguments = raw["name"], raw.get("arguments", {})
            if isinstance(arguments, str):
                arguments = json.loads(arguments)
            if not isinstance(name, str) or not isinstance(arguments, dict):
                raise TypeError("name must be a string and arguments an object")
        except (ValueError, KeyError, TypeError) as exc:
            errors.append(f"tool call {index}: {type(exc).__name__}: {exc}"[:200])
            continue
        calls.append({"id": f"call_{turn}_{index}", "type": "function",
                      "function": {"name": name, "arguments": arguments}})
    return calls, errors


@dataclass
class Episode:
    request: PromptRequest
    row: dict[str, Any]
    messages: list[Message] = field(default_factory=list)
    prompt_text: str = ""
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_spans: list[list[int]] = field(default_factory=list)
    turns_truncated: int = 0  # policy turns cut at generation.max_tokens
    turn_rewards: list[float | None] = field(default_factory=list)
    turn_versions: list[int] = field(default_factory=list)  # gateway: each call's policy version (empty: built-in)
    end: str | None = None  # done | max_turns | max_episode_tokens | error
    retries: int = 0  # restarts after its environment was lost
    error: str | None = None
    started_at: float = 0.0
    finished_at: float = 0.0

    @property
    def turns(self) -> int:
        return len(self.turn_spans)

    @property
    def final_answer(self) -> str:
        """The content of the policy's last message (what an `environment.grader` scores)."""
        return next((str(m.get("content") or "") for m in reversed(self.messages) if m.get("role") == "assistant"), "")

    def add(self, ids: list[int], trained: bool, logprobs: list[float] | None = None) -> None:
        self.response_ids += ids
        self.loss_mask += [1 if trained else 0] * len(ids)
        self.logprobs += list(logprobs) if logprobs is not None else [0.0] * len(ids)


class EpisodeRunner:
    """Runs episodes of one environment with one tokenizer (its chat template); keeps no per-episode state."""

    def __init__(self, env: Environment, tokenizer: Any, spec: EnvironmentSpec, sampling: SamplingParams, *,
                 system_prompt: str | None = None):
        self.env, self.tokenizer, self.spec, self.sampling = env, tokenizer, spec, sampling
        self.system_prompt = system_prompt
        self.tools = env.tools
        template = getattr(tokenizer, "chat_template", None)
        if not template:
            raise ValueError("environments need a model whose tokenizer has a chat template")
        self.template_takes_tools = "tools" in str(template)

    # -- rendering ----------------------------------------------------------------------------------------------------
    def _render(self, messages: list[Message], generation_prompt: bool) -> str:
        plain = [{k: v for k, v in m.items() if k in ("role", "content", "name", "tool_call_id", "tool_calls")}
                 for m in messages]
        kwargs: dict[str, Any] = {"tools": self.tools} if self.tools and self.template_takes_tools else {}
        return str(self.tokenizer.apply_chat_template(plain, tokenize=False, add_generation_prompt=generation_prompt,
                                                      **kwargs))

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _opening(self, messages: list[Message]) -> list[Message]:
        messages = with_system_prompt(messages, self.system_prompt)
        if self.tools and not self.template_takes_tools:
            note = TOOLS_SYSTEM.format(tools=describe_tools(self.tools))
            if messages and messages[0]["role"] == "system":
                messages = [{**messages[0], "content": f"{messages[0]['content']}\n\n{note}"}, *messages[1:]]
            else:
                messages = [{"role": "system", "content": note}, *messages]
        return messages

    def _closing(self, before: list[Message], generated_ids: list[int]) -> str:
        """The template's markup after an assistant turn's content that the policy did not generate itself."""
        text = self._render([*before, {"role": "assistant", "content": SENTINEL}], False)
        at = text.rfind(SENTINEL)
        closing = text[at + len(SENTINEL):] if at >= 0 else ""
        raw = self.tokenizer.decode(generated_ids, skip_special_tokens=False)
        for k in range(len(closing), 0, -1):
            if raw.endswith(closing[:k]):
                return closing[k:]
        return closing

    def opening(self, row: Mapping[str, Any], episode: str = "") -> list[Message]:
        """The conversation an episode of `row` opens with: the environment's reset, the job's system prompt and the
        tools note (what SFT demonstrations must match, workers/environments/demos.py). Raises EnvironmentFailure."""
        return self._opening(self.env.reset(row, episode))

    # -- the loop -----------------------------------------------------------------------------------------------------
    def start(self, request: PromptRequest) -> tuple[Episode, GenerationRequest | None]:
        row = {"prompt": request.prompt_text, **request.meta}
        episode = Episode(request=request, row=row, started_at=time.time())
        return episode, self._open(episode)

    def _open(self, episode: Episode) -> GenerationRequest | None:
        try:
            episode.messages = self.opening(episode.row, episode.request.sample_id)
        except EnvironmentFailure as exc:
            self._fail(episode, f"environment reset: {exc}")
            return None
        episode.prompt_text = self._render(episode.messages, True)
        episode.prompt_ids = self._encode(episode.prompt_text)
        return self._next(episode)

    def _retry(self, episode: Episode, lost: EnvironmentLost) -> GenerationRequest | None:
        """The environment lost the episode's state: start it over from its reset (or fail it, retries spent)."""
        if episode.retries >= MAX_EPISODE_RETRIES:
            self._fail(episode, f"environment step: {lost} (after {episode.retries} retries of the episode)")
            return None
        self.env.finish(episode.request.sample_id)
        retries = episode.retries + 1
        fresh = Episode(request=episode.request, row=episode.row, started_at=episode.started_at, retries=retries)
        for name in ("messages", "prompt_text", "prompt_ids", "response_ids", "loss_mask", "logprobs", "turn_spans",
                     "turns_truncated", "turn_rewards"):
            setattr(episode, name, getattr(fresh, name))
        episode.retries = retries
        return self._open(episode)

    def _next(self, episode: Episode) -> GenerationRequest | None:
        left = self.spec.max_episode_tokens - len(episode.response_ids)
        if left <= 0:
            self._finish(episode, "max_episode_tokens")
            return None
        seed = episode.request.seed
        sampling = dataclasses.replace(self.sampling, max_tokens=min(self.sampling.max_tokens, left),
                                       seed=None if seed is None else (seed + 7919 * episode.turns) & 0x7FFFFFFF)
        return GenerationRequest(request_id=episode.request.sample_id,
                                 prompt_ids=episode.prompt_ids + episode.response_ids, meta=episode.request.meta,
                                 sampling=sampling)

    def advance(self, episode: Episode, result: GenerationResult) -> GenerationRequest | None:
        """One finished turn: its tokens (trained), the environment's answer (context); the next turn or None."""
        start = len(episode.response_ids)
        episode.add(list(result.response_ids), True, list(result.logprobs))
        episode.turn_spans.append([start, len(episode.response_ids)])
        episode.turns_truncated += result.finish_reason == "length"  # this turn was cut at max_tokens
        calls, call_errors = parse_tool_calls(result.text, episode.turns)
        before = list(episode.messages)
        assistant: Message = {"role": "assistant", "content": result.text}
        if calls:
            assistant["tool_calls"] = calls
        if call_errors:
            assistant["tool_call_errors"] = call_errors
        episode.messages.append(assistant)
        try:
            new, reward, done = self.env.step(list(episode.messages), episode.row, episode.request.sample_id)
        except EnvironmentLost as exc:
            return self._retry(episode, exc)
        except EnvironmentFailure as exc:
            episode.turn_rewards.append(None)
            self._fail(episode, f"environment step: {exc} (turn {episode.turns})")
            return None
        episode.turn_rewards.append(reward)
        if done:
            self._finish(episode, "done")
            return None
        if episode.turns >= self.spec.max_turns:
            self._finish(episode, "max_turns")
            return None
        try:
            without = self._render([*before, assistant], False)
            with_env = self._render([*before, assistant, *new], True)
        except Exception as exc:  # noqa: BLE001 - a template that cannot render these messages ends the episode
            self._fail(episode, f"environment step: the chat template cannot render its messages: {exc}")
            return None
        if not with_env.startswith(without):
            self._fail(episode, "environment step: the chat template does not render the conversation "
                       "prefix-stably, so the turns cannot be joined token by token")
            return None
        context = self._encode(self._closing(before, list(result.response_ids)) + with_env[len(without):])
        if len(episode.response_ids) + len(context) >= self.spec.max_episode_tokens:
            self._finish(episode, "max_episode_tokens")
            return None
        episode.messages += new
        episode.add(context, False)
        return self._next(episode)

    def _finish(self, episode: Episode, end: str) -> None:
        episode.end, episode.finished_at = end, time.time()
        self.env.finish(episode.request.sample_id)

    def _fail(self, episode: Episode, error: str) -> None:
        episode.error = error
        self._finish(episode, "error")

    def to_sample(self, episode: Episode, *, job_id: int, version: int, instance_id: str,
                  graded: RewardOutcome | None = None) -> Sample:
        return episode_sample(episode, self.tokenizer, job_id=job_id, version=version, instance_id=instance_id,
                              graded=graded)


def episode_sample(episode: Episode, tokenizer: Any, *, job_id: int, version: int, instance_id: str,
                   graded: RewardOutcome | None = None) -> Sample:
    """The finished episode as one Sample (`build_sample`, workers/core/sample.py), built-in or gateway (workers/core/
    gateway.py). `version`: the weights its first turn was admitted under; `graded`: the environment.grader's
    outcome on its final answer (`grade_episodes`), added to the steps' rewards."""
    request = episode.request
    prompt_ids = episode.prompt_ids or list(request.prompt_ids)
    steps = sum(r for r in episode.turn_rewards if r is not None)
    error = episode.error
    if error is None and graded is not None and graded.error is not None:
        error = f"environment.grader: {graded.error}"
    reward = steps + graded.value if graded is not None else steps
    components = {"environment": float(steps), "grader": graded.value,
                  **{f"grader.{k}": v for k, v in graded.components.items()}} if graded is not None else {}
    outcome = RewardOutcome(0.0 if error else float(reward), {} if error else components, error)
    return build_sample(
        request, job_id=job_id, instance_id=instance_id, prompt_ids=prompt_ids, response_ids=episode.response_ids,
        logprobs=episode.logprobs, loss_mask=episode.loss_mask, version=version, reward=outcome,
        finish_reason={"done": "stop", "error": "error"}.get(episode.end or "", "length"),
        prompt_text=episode.prompt_text or request.prompt_text,
        response_text=tokenizer.decode(episode.response_ids, skip_special_tokens=False),
        started_at=episode.started_at, finished_at=episode.finished_at,
        truncated=episode.end == "max_episode_tokens", turns_truncated=episode.turns_truncated,
        turn_versions=list(episode.turn_versions) or None, turns=episode.turns,
        turn_spans=[list(s) for s in episode.turn_spans], turn_rewards=list(episode.turn_rewards),
        messages=list(episode.messages), episode_end=episode.end,
        segments=[{**run, "text": tokenizer.decode(episode.response_ids[run["start"]:run["end"]],
                                                   skip_special_tokens=False)}
                  for run in mask_segments(episode.loss_mask)],
    )


def grade_episodes(grader: Reward | None, episodes: list[Episode]) -> list[RewardOutcome | None]:
    """The grader's outcome on each episode's final answer, in one `score_many` batch (a judge or reward model scores
    them together); None for each episode when there is no grader, and for an episode that already failed."""
    scored = [e for e in episodes if e.error is None] if grader is not None else []
    outcomes = iter(grader.score_many([(e.request.prompt_text, e.final_answer, e.request.meta) for e in scored])
                    if grader is not None and scored else [])
    return [next(outcomes) if grader is not None and e.error is None else None for e in episodes]


def run_episodes(engine: GenerationEngine, runner: EpisodeRunner, requests: Iterable[PromptRequest], *, job_id: int,
                 instance_id: str, grader: Reward | None = None) -> list[Sample]:
    """Every request's episode in one continuous batch (each next turn is admitted as the previous finishes), graded
    by `grader` (the job's environment.grader) when there is one; samples in finish order. The colocated / train-local
    rollout; instances drive `EpisodeRunner` from their feed."""
    version = engine.version
    live: dict[str, Episode] = {}
    pending: deque[GenerationRequest] = deque()
    finished: list[Episode] = []
    for request in requests:
        episode, first = runner.start(request)
        if first is None:
            finished.append(episode)
        else:
            live[request.sample_id] = episode
            pending.append(first)

    def feed() -> Iterator[GenerationRequest | None]:
        while live:
            yield pending.popleft() if pending else None

    for result in engine.generate_stream(feed()):
        episode = live[result.request_id]
        following = runner.advance(episode, result)
        if following is None:
            finished.append(live.pop(result.request_id))
        else:
            pending.append(following)
    return [runner.to_sample(e, job_id=job_id, version=version, instance_id=instance_id, graded=g)
            for e, g in zip(finished, grade_episodes(grader, finished), strict=True)]


def episode_record(sample: Sample) -> dict[str, Any] | None:
    """What the dashboard stores of an episode (the `episode` of a sample row): the conversation, the turns and
    the response cut into trained (policy) and context (environment) segments with their text."""
    if sample.loss_mask is None:
        return None
    return {"turns": sample.turns, "end": sample.episode_end, "turn_rewards": sample.turn_rewards,
            "turn_spans": sample.turn_spans, "turn_versions": sample.turn_versions, "messages": sample.messages,
            "trained_tokens": sum(sample.loss_mask), "context_tokens": len(sample.loss_mask) - sum(sample.loss_mask),
            "segments": sample.segments or mask_segments(sample.loss_mask)}


def mask_segments(mask: list[int]) -> list[dict[str, Any]]:
    """[{start, end, trained}] runs of equal mask values over the response tokens."""
    runs: list[dict[str, Any]] = []
    for index, value in enumerate(mask):
        if runs and runs[-1]["trained"] == bool(value):
            runs[-1]["end"] = index + 1
        else:
            runs.append({"start": index, "end": index + 1, "trained": bool(value)})
    return runs
