"""An unmodified OpenAI Agents SDK agent (openai-agents 0.24: `Agent` + one `@function_tool` calculator, run by
`Runner.run` on an `OpenAIChatCompletionsModel` whose `AsyncOpenAI` client has only `base_url` and `api_key` set) as
`agent.code` with `agent.requirements`, on the real platform (Celery workers, Postgres, Redis, the API on uvicorn):
the generation instance runs it per episode in the jail, its requirements installed from the package index, and
the job trains to `succeeded`.

Every trained token is a token the policy sampled for the agent: the agent returns as its reward its correctness
plus 1/1000 of the completion tokens the gateway served it (the SDK's own usage count), and each stored sample's
trained tokens (loss mask 1) number exactly that and carry a recorded behaviour logprob. Token fidelity over every
call the SDK made (tests/integration/token_fidelity.py) is asserted at 100% and printed as a TOKEN_FIDELITY line.
Each episode's agent also tries to fork and to reach Postgres and Redis first (reward -1 if any of it worked): all
refused, the episodes go on.
With 2 held-out rows the job's held-out curve starts at the initial weights (the "held-out reward before training"
event: streaming jobs whose episodes come from an agent evaluate before iteration 0) and has the trained point.
Hostile agents failing their own episodes are tests/agents/test_agent_jail.py.
Learning (`test_an_sdk_agent_learns_to_use_its_tool`): the same kind of agent (a `calc` tool, reward = its final
answer's correctness) on two-digit word problems, on a chat model warmed on tool use (tests/integration/
tool_use_model.py: built cold by the test, ~1 CPU-minute; it calls the tool, copying the operands, on about a
third of the problems and guesses the number on the rest). The job's held-out reward (the initial weights'
evaluation before training, then after the last iteration) rises by >= 0.2: GRPO reinforces calling the tool."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from package_cache import CACHE, built
from runtime_platform import Platform, base_spec
from token_fidelity import fidelity, model_dir
from transformers import AutoTokenizer
from waiting import api_in_thread

from contract.states import JobStatus
from workers.rewards.jail import missing_piece

pytestmark = [pytest.mark.integration, pytest.mark.slow,
              pytest.mark.skipif(missing_piece() is not None, reason=f"no jail here: {missing_piece()}")]
REQUIREMENTS = ["openai-agents==0.24.0"]
HELD_OUT = 2  # held-out rows: evaluated on the initial weights and after the iteration
AGENT = '''
import ast, operator, os, socket

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
       ast.USub: operator.neg}


def _eval(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in OPS:
        return OPS[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in OPS:
        return OPS[type(node.op)](_eval(node.operand))
    raise ValueError("not arithmetic")


@function_tool
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression such as 12 * (3 + 4)."""
    try:
        return str(_eval(ast.parse(expression, mode="eval").body))
    except (ValueError, SyntaxError, ZeroDivisionError) as exc:
        return f"error: {exc}"


async def run(task, base_url, api_key):
    escaped = []  # hostile on the side: each attempt must fail inside the jail
    for attempt in (os.fork, lambda: socket.create_connection(("127.0.0.1", 5432), timeout=1),
                    lambda: socket.create_connection(("127.0.0.1", 6379), timeout=1)):
        try:
            if attempt() == 0:
                os._exit(0)  # the child of a fork that should not have happened
            escaped.append(attempt)
        except OSError:
            pass
    if escaped:
        return -1.0
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key=api_key)
    agent = Agent(name="calculator", instructions="Solve the problem. Use the calculate tool, then answer with the "
                  "number only.", tools=[calculate],
                  model=OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client),
                  model_settings=ModelSettings(max_tokens=12, temperature=1.0))
    result = await Runner.run(agent, task["prompt"], max_turns=4)
    correct = str(result.final_output).strip() == str(task["answer"]).strip()
    return 0.5 * correct + result.context_wrapper.usage.output_tokens / 1000  # < 1: a 1.0 reward is never ambiguous
'''


@pytest.fixture(scope="module")
def platform(pg_backend: Any, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    from workers.models import build_tiny_model

    root = tmp_path_factory.mktemp("agent-code")
    model_dir = build_tiny_model("chat-qwen2-1m", root / "chat", seed=0)
    built(*REQUIREMENTS)  # the workers' package cache (tests/package_cache.py), warmed by the same code
    with api_in_thread(pg_backend.settings) as url, Platform.start(
            pg_backend, redis_url, model_dir, generation_slots=2,
            extra_env={"STREAMRL_PUBLIC_URL": url, "STREAMRL_AGENT_PACKAGES_DIR": str(CACHE)}) as running:
        running.api_url = url  # type: ignore[attr-defined]
        yield running


def test_an_openai_agents_sdk_agent_trains_as_agent_code(platform: Platform) -> None:
    spec = base_spec(environment={"type": "gateway", "max_turns": 4, "max_episode_tokens": 200},
                     agent={"code": AGENT, "requirements": REQUIREMENTS, "concurrency": 4, "timeout_s": 120},
                     dataset={"eval_prompts": HELD_OUT},
                     algorithm={"name": "grpo", "group_size": 2},
                     generation={"instances": 1, "batch_size": 8, "max_tokens": 12, "temperature": 1.0},
                     training={"iterations": 1, "prompts_per_iteration": 1, "micro_batch_size": 8, "lr": 1e-3,
                               "eval_every": 1})
    del spec["reward"]
    job_id = platform.submit_as(platform.team, platform.user, spec)
    job = platform.wait_done(job_id, timeout_s=600)
    assert job.status == JobStatus.succeeded, (job.error, platform.events(job_id)[-10:], platform.logs_tail())
    # an agent job's held-out curve has its start: the initial weights' evaluation (episodes of the agent, before
    # iteration 0; workers/runtime/streaming.py evaluates_untrained), then the trained weights' after iteration 0
    before = [m for m in platform.events(job_id) if m.startswith("held-out reward before training:")]
    after = [(int(r["eval_version"]), r["eval_reward"]) for r in platform.iterations(job_id)
             if r.get("eval_reward") is not None]
    assert len(before) == 1 and [v for v, _ in after] == [1], (before, after, platform.events(job_id)[-10:])
    print(f"held-out: {before[0]} -> {after}")

    headers = platform.backend.auth_headers(platform.user, platform.team)
    checked = 0
    with platform.backend.client() as api:
        samples = api.get(f"/api/v1/jobs/{job_id}/samples", params={"limit": 1000}, headers=headers).json()["data"]
        assert samples, platform.events(job_id)
        for sample in samples:
            record = api.get(f"/api/v1/jobs/{job_id}/samples/{sample['sample_id']}/tokens", headers=headers).json()
            assert sample["reward_error"] is None and sample["reward"] >= 0, sample  # nothing escaped the jail
            mask = record["loss_mask"] or [1] * len(record["pieces"])
            trained = [i for i, m in enumerate(mask) if m]
            served = round((record["reward"] % 0.5) * 1000)  # the completion tokens the SDK counted (< 48 here)
            assert len(trained) == served > 0, (sample["sample_id"], len(trained), record["reward"])
            assert all(record["behaviour"][i] < 0 for i in trained)  # each a sampled token with its logprob
            assert all(record["behaviour"][i] == 0.0 for i, m in enumerate(mask) if not m)  # context: none
            checked += 1
    print(f"samples {len(samples)}: {checked} checked token for token")
    assert checked >= 1
    # token fidelity over every call the SDK made (tests/integration/token_fidelity.py): each recorded prompt is the
    # template's re-rendering of the SDK's messages and tools; each trained token a recorded sampled one + its logprob
    figures = fidelity(platform, job_id, AutoTokenizer.from_pretrained(model_dir(platform)))
    print(figures.line())
    figures.assert_complete()


# -- learning: the same kind of agent on a model warmed on tool use (tests/integration/tool_use_model.py) ------------
LEARNING_AGENT = '''
import ast, operator

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def _eval(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in OPS:
        return OPS[type(node.op)](_eval(node.left), _eval(node.right))
    raise ValueError("not arithmetic")


@function_tool
def calc(expression: str) -> str:
    """Evaluate an arithmetic expression such as 12+3."""
    try:
        return str(_eval(ast.parse(expression, mode="eval").body))
    except (ValueError, SyntaxError) as exc:
        return f"error: {exc}"


async def run(task, base_url, api_key):
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key=api_key)
    agent = Agent(name="calculator", instructions="%(instructions)s", tools=[calc],
                  model=OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client),
                  model_settings=ModelSettings(max_tokens=%(max_tokens)d, temperature=1.0))
    try:
        result = await Runner.run(agent, task["prompt"], max_turns=3)
    except Exception:  # the policy looped on the tool past max_turns, or called one that does not exist: wrong
        return 0.0
    return float(str(result.final_output).strip() == str(task["answer"]).strip())
'''
LEARN_ITERATIONS, LEARN_EVAL_EVERY, LEARN_HELD_OUT, LEARN_MAX_TOKENS = 12, 12, 64, 24
LEARN_PROMPTS, LEARN_GROUP, LEARN_LR = 6, 8, 5e-4
# measured rises (start -> end, load 4-9): 10 iterations x 2 prompts at lr 2.5e-4, 0.25 -> 0.69 and 0.34 -> 0.72 with
# a dip to 0.38-0.41 at v6; 12 x 4 at 5e-4, 0.44 -> 0.83 (v8 0.64); 8 x 6 at 5e-4, +0.34 twice; 12 x 6 (these):
# 0.28 -> 0.69, 0.23 -> 0.83, 0.30 -> 0.72 (module 110-139 s wall, ~115 CPU-s of its process tree, ~24 without it)
LOGPROB_TOLERANCE = 0.02  # sampler vs trainer logprob of one token at one version (same weights, fp32 on CPU)


def test_an_sdk_agent_learns_to_use_its_tool(platform: Platform, tmp_path: Path) -> None:
    """Held-out reward (the agent's correctness on word problems none of which it trained on) rises by >= 0.2 from
    the initial weights' evaluation to the last one, on a model that calls the tool on part of the problems."""
    from tool_use_model import INSTRUCTIONS, held_out_split, warm_tool_model

    from backend.db.models import Model

    cpu = time.process_time()
    model = warm_tool_model(tmp_path / "calc-warm")  # built cold every time: a fresh CI machine's cost
    print(f"warm model built: {time.process_time() - cpu:.1f} CPU-s (this process, all threads)")
    with platform.backend.session() as session:
        session.add(Model(team_id=platform.team.id, name="calc-warm", path=str(model), created_by_id=platform.user.id))
    train, held = held_out_split(LEARN_ITERATIONS * LEARN_PROMPTS, LEARN_HELD_OUT)
    headers = platform.backend.auth_headers(platform.user, platform.team)
    with platform.backend.client() as api:
        lines = "".join(json.dumps({"prompt": r["prompt"], "answer": r["answer"]}) + "\n" for r in train + held)
        uploaded = api.post("/api/v1/datasets", data={"name": "word-problems"},
                            files={"file": ("problems.jsonl", lines.encode())}, headers=headers)
        assert uploaded.status_code == 201, uploaded.text
    dataset = {"id": uploaded.json()["id"], "builtin": None, "eval_prompts": LEARN_HELD_OUT}
    code = LEARNING_AGENT % {"instructions": INSTRUCTIONS, "max_tokens": LEARN_MAX_TOKENS}
    spec = base_spec(model="calc-warm", dataset=dataset,
                     environment={"type": "gateway", "max_turns": 4, "max_episode_tokens": 120},
                     agent={"code": code, "requirements": REQUIREMENTS, "concurrency": 4, "timeout_s": 120,
                            "episodes_per_jail": 1000},  # `import agents` (~2.4 CPU-s) once per lane
                     algorithm={"name": "grpo", "group_size": LEARN_GROUP},
                     generation={"instances": 1, "batch_size": 16, "max_tokens": LEARN_MAX_TOKENS,
                                 "temperature": 1.0},
                     training={"iterations": LEARN_ITERATIONS, "prompts_per_iteration": LEARN_PROMPTS,
                               "micro_batch_size": 16, "lr": LEARN_LR, "eval_every": LEARN_EVAL_EVERY})
    del spec["reward"]
    job_id = platform.submit_as(platform.team, platform.user, spec)
    job = platform.wait_done(job_id, timeout_s=900)
    assert job.status == JobStatus.succeeded, (job.error, platform.events(job_id)[-10:], platform.logs_tail())
    before = [float(m.rsplit(":", 1)[1]) for m in platform.events(job_id)  # the initial weights' held-out reward
              if m.startswith("held-out reward before training:")]      # (workers/runtime/driver.py)
    rows = platform.iterations(job_id)
    after = [(int(r["eval_version"]), r["eval_reward"]) for r in rows if r.get("eval_reward") is not None]
    assert len(before) == 1 and after, (before, after, platform.events(job_id)[-10:])
    print(f"RESULT sdk_agent_heldout_start={before[0]:.3f} heldout_end={after[-1][1]:.3f} "
          f"rise={after[-1][1] - before[0]:.3f} curve={after} "
          f"train_reward={[round(r['reward_mean'], 3) for r in rows]}")
    # the tool's use is trained: a rewarded episode is one sequence (the call, the tool's result as context, the
    # answer), its trained tokens the policy's sampled ones with their logprobs: the behaviour logprob recorded at
    # sampling is the trainer's own logprob of that token at the same version (sync: the sampling one), which a
    # re-tokenised or shifted token would not match (the exact recorded ids: the fidelity check above)
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    called = guessed = 0
    worst = 0.0
    with platform.backend.client() as api:
        samples = api.get(f"/api/v1/jobs/{job_id}/samples", params={"limit": 1000}, headers=headers).json()["data"]
        for sample in samples:
            if sample["reward"] != 1.0:
                continue
            record = api.get(f"/api/v1/jobs/{job_id}/samples/{sample['sample_id']}/tokens", headers=headers).json()
            mask = record["loss_mask"] or [1] * len(record["pieces"])
            trained = [i for i, m in enumerate(mask) if m]
            assert [v for _, v in record["versions"]] == [record["trained_version"]], record["versions"]
            assert all(record["behaviour"][i] == 0.0 for i, m in enumerate(mask) if not m)  # context: none
            gaps = [abs(record["behaviour"][i] - record["current"][i]) for i in trained]
            worst = max(worst, *gaps)
            assert max(gaps) < LOGPROB_TOLERANCE, (sample["sample_id"], gaps, record["pieces"])
            text = "".join(record["pieces"][i] for i in trained)
            if len(trained) == len(mask):  # answered at once, and right: one turn, no tool
                assert text.removesuffix(tokenizer.eos_token).isdigit(), text
                guessed += 1
                continue
            assert text.startswith("<tool_call>{") and "</tool_call>" in text, text
            context = "".join(p for p, m in zip(record["pieces"], mask, strict=True) if not m)
            assert "R: " in context, context  # the tool's result, rendered by the template: not trained
            called += 1
    print(f"rewarded samples: {called} called the tool (trained: the call and the answer, the result as context), "
          f"{guessed} guessed right at once; max |behaviour - trainer| logprob over their trained tokens {worst:.4f}")
    assert called, (called, guessed)
    assert after[-1][0] == LEARN_ITERATIONS and after[-1][1] - before[0] >= 0.2, (before, after)
