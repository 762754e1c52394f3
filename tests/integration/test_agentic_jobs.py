"""Multi-turn, tool-using jobs on the real platform (Celery worker processes, Postgres, Redis, the controller loop),
checked through the REST API: the calculator environment on a locally built BPE chat model (chat-qwen2-1m) in sync
and async mode runs to `succeeded`, its stored episodes train only the policy's tokens (the tool's results are
context), and the reward rises; graded by `environment.grader` (a judge model and an exact check of the final
answer against the uploaded row's), its episodes carry the grade's parts and it learns too; a hostile user
environment fails its episodes one by one, naming why, while its job and another team's job beside it go on.

The model gets a short SFT warm start on calculator tool-use demonstrations (workers/environments/demos.py), shared by
the module: a random model never writes a well-formed tool call. The problems are the calculator's smallest (two
operands of 2: `2 + 2`, `2 - 2`, `2 * 2`), so the warm policy calls the tool in some episodes and answers right in a
few, and GRPO at lr 2e-3 raises the reward within a dozen iterations (mostly by answering directly: on these problems
the tool calls fade under GRPO, see bench/agentic.py). Masks are checked on the calculator episodes that called the
tool and, deterministically, on the hostile job's fair episodes (a tool result between two turns)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from grader_models import HIGH, LOW, build_digit_judge
from runtime_platform import Platform, base_spec, wait_until
from sqlalchemy import select
from transformers import AutoTokenizer

from backend.db import Model, Team, User
from backend.services.jobs import create_job
from contract.spec import JobSpec
from contract.states import JobStatus

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CALCULATOR = {"operands": 2, "max_operand": 2}
ENVIRONMENT = {"type": "calculator", "params": CALCULATOR, "max_turns": 3, "max_episode_tokens": 200}


def _warm_model(out: Path) -> Path:
    from workers.core.episode import EpisodeRunner
    from workers.core.rollout import sampling_params
    from workers.environments import build_environment
    from workers.environments.demos import calculator_demonstrations
    from workers.models import build_tiny_model
    from workers.training.sft import sft_warm_start

    base = build_tiny_model("chat-qwen2-1m", out / "base", seed=0)
    spec = JobSpec.model_validate({"model": str(base), "dataset": {"builtin": "arithmetic"},
                                   "environment": ENVIRONMENT})
    assert spec.environment is not None
    runner = EpisodeRunner(build_environment(spec.environment), AutoTokenizer.from_pretrained(base), spec.environment,
                           sampling_params(spec.generation))
    rows = [{"prompt": f"sft {i}", "prompt_id": f"sft-{i}"} for i in range(2000)]
    demos = calculator_demonstrations(rows, runner.opening, CALCULATOR)
    return sft_warm_start(base, out / "sft", demos, steps=150, batch_size=12, lr=3e-3, seed=0,
                          target_loss=0.3).model_dir


@pytest.fixture(scope="module")
def agentic_platform(pg_backend: Any, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    model_dir = _warm_model(tmp_path_factory.mktemp("agentic"))
    with Platform.start(pg_backend, redis_url, model_dir) as running:
        yield running


def _api_samples(platform: Platform, job_id: int, headers: dict[str, str]) -> list[dict[str, Any]]:
    with platform.backend.client() as api:
        answer = api.get(f"/api/v1/jobs/{job_id}/samples", params={"limit": 1000}, headers=headers)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["data"])


def _calculator_job(mode: str) -> dict[str, Any]:
    return {"mode": mode, "environment": ENVIRONMENT,
            "dataset": {"builtin": "arithmetic", "num_prompts": 256, "eval_prompts": 0},
            "algorithm": {"name": "grpo", "group_size": 8},
            "generation": {"instances": 1, "batch_size": 32, "max_tokens": 80, "temperature": 1.0},
            "training": {"iterations": 12, "prompts_per_iteration": 4, "micro_batch_size": 32, "lr": 2e-3,
                         "eval_every": 0},
            "telemetry": {"samples_per_iteration": 64}}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_calculator_job_learns_and_trains_only_the_policy_tokens(agentic_platform: Platform, mode: str) -> None:
    platform = agentic_platform
    job_id = platform.submit(**_calculator_job(mode))
    platform.wait_done(job_id, timeout_s=600)
    samples = _api_samples(platform, job_id, platform.backend.auth_headers(platform.user, platform.team))
    assert samples and all(s["episode"] is not None for s in samples)
    for sample in samples:  # whichever episodes called the tool (the warm policy does in some): checked
        _check_masks(sample)

    rows = platform.iterations(job_id)
    rewards = [row["reward_mean"] for row in rows]
    assert len(rewards) == 12 and all(row["episode_errors"] == 0 for row in rows), rows[-1]
    # it learns: some 3-iteration stretch beats the first two iterations (the warm policy) by 0.15; at this lr the
    # reward peaks and dips again (GRPO on 32 episodes an iteration), so the stretch, not the last iterations. Runs
    # here: sync 0.30 -> 0.52 and async 0.16 -> 0.51 (0.2 left sync a margin of 0.02 against batch-order noise)
    windows = [sum(rewards[i:i + 3]) / 3 for i in range(2, len(rewards) - 2)]
    assert max(windows) >= sum(rewards[:2]) / 2 + 0.15, rewards


def _check_masks(sample: dict[str, Any]) -> int:
    """The stored episode's segments cover its response, and the tool's results (with their markup) are context,
    never trained. Returns how many tool messages it had."""
    episode = sample["episode"]
    segments = episode["segments"]
    assert [seg["start"] for seg in segments] == [0] + [seg["end"] for seg in segments[:-1]]  # contiguous runs
    assert segments[-1]["end"] == sample["length"]  # covering every response token
    joined = "".join(seg["text"] for seg in segments)
    if "\ufffd" not in joined + sample["response"]:  # a byte-level BPE policy can cut a UTF-8 character at a
        assert joined == sample["response"]          # segment edge: each side then decodes it as U+FFFD
    trained = "".join(seg["text"] for seg in segments if seg["trained"])
    context = "".join(seg["text"] for seg in segments if not seg["trained"])
    assert episode["trained_tokens"] == sum(seg["end"] - seg["start"] for seg in segments if seg["trained"])
    assert episode["trained_tokens"] + episode["context_tokens"] == sample["length"]
    tools = [m for m in episode["messages"] if m["role"] == "tool"]
    for message in tools:
        assert f"<|im_start|>tool\n{message['content']}<|im_end|>" in context, segments
    assert not tools or "<|im_start|>tool" not in trained, segments
    return len(tools)


# the calculator's three problems as dataset rows: the environment reads `expression`, the grader `{{ item.answer }}`
GRADED_ROWS = [{"prompt": f"What is {e}?", "expression": e, "answer": a} for e, a in
               [("2 + 2", "4"), ("2 - 2", "0"), ("2 * 2", "4")]]
FINAL = "{{ sample.output_text }}"
ITERATIONS, MARGIN = 8, 0.5
JUDGE_SCORES = (float(LOW), float(HIGH))  # the digit judge replies one of the two (tests/grader_models.py)
GRADER = {"type": "multi", "params": {"graders": {
    "judge": {"type": "judge", "model": "judge", "range": [0, 10], "max_tokens": 1,
              "input": [{"role": "user", "content": "Grade the answer 0-10: " + FINAL}]},
    "exact": {"type": "string_check", "input": FINAL, "reference": "{{ item.answer }}", "operation": "eq"},
}, "calculate_output": "exact + judge / 100"}}


def test_an_environment_job_graded_by_a_judge_and_an_exact_check_learns(agentic_platform: Platform) -> None:
    """environment.grader on the real platform: the generation instance loads the judge next to the policy and grades
    each episode's final answer (a judge + string_check `multi` against the uploaded row's answer); the grade is added
    to the environment's step reward, its parts are stored per sample, and the reward rises."""
    platform = agentic_platform
    headers = platform.backend.auth_headers(platform.user, platform.team)
    judge_dir = build_digit_judge(Path(platform.backend.settings.artifacts) / "models" / f"judge-{uuid.uuid4().hex}")
    with platform.backend.client() as api:
        registered = api.post("/api/v1/models", json={"name": "judge", "path": str(judge_dir)}, headers=headers)
        assert registered.status_code == 201, registered.text
        rows = "".join(json.dumps(row) + "\n" for row in GRADED_ROWS).encode()
        uploaded = api.post("/api/v1/datasets", data={"name": "calculator-graded"},
                            files={"file": ("calculator.jsonl", rows)}, headers=headers)
        assert uploaded.status_code == 201, uploaded.text
        spec = _calculator_job("sync")
        spec["dataset"] = {"id": uploaded.json()["id"], "builtin": None, "eval_prompts": 0}
        spec["training"] = {**spec["training"], "iterations": ITERATIONS}
        spec["environment"] = {**ENVIRONMENT, "grader": GRADER}
        submitted = api.post("/api/v1/jobs", json=base_spec(**spec), headers=headers)
        assert submitted.status_code == 201, submitted.text
    job_id = int(submitted.json()["id"])
    platform.wait_done(job_id, timeout_s=600)

    iterations = platform.iterations(job_id)
    rewards = [row["reward_mean"] for row in iterations]
    assert len(rewards) == ITERATIONS, iterations
    assert all(row["episode_errors"] == 0 and row["reward_errors"] == 0 for row in iterations), iterations
    samples = _api_samples(platform, job_id, headers)
    assert len(samples) == ITERATIONS * 4 * 8
    answers = {row["prompt"]: row["answer"] for row in GRADED_ROWS}
    for sample in samples:
        parts, episode = sample["reward_components"], sample["episode"]
        assert sample["reward_error"] is None and parts is not None, sample
        assert parts["environment"] in (0.0, 1.0) and parts["grader.exact"] in (0.0, 1.0), parts
        assert parts["grader.judge"] in JUDGE_SCORES, parts
        assert parts["grader"] == pytest.approx(parts["grader.exact"] + parts["grader.judge"] / 100), parts
        assert sample["reward"] == pytest.approx(parts["environment"] + parts["grader"]), (sample["reward"], parts)
        # the grader saw this episode's final answer and its row's answer (`item.answer` of the uploaded row)
        question = next(m["content"] for m in episode["messages"] if m["role"] == "user")
        final = next(m["content"] for m in reversed(episode["messages"]) if m["role"] == "assistant")
        assert parts["grader.exact"] == float(final == answers[question]), (question, final, parts)
    assert any(s["reward_components"]["grader.exact"] == 1.0 for s in samples)
    # it learns: after updates on the judged rewards, an iteration beats the warm policy's (iteration 1, sampled
    # before any update) by MARGIN; a right answer "4" now earns 2.07 (the environment's 1, the exact check's 1, the
    # judge's 0.07). Runs here: 0.40 -> 1.33 over a 3-iteration stretch; in another batch order (samples are trained
    # in the order they finished) 0.41 -> 1.38 at iteration 2, then the policy collapses (0.10) at this lr: the
    # rewards drive learning both times, a stretch is not a given, so one iteration is what this checks
    assert max(rewards[1:]) >= rewards[0] + MARGIN, rewards


# step() misbehaves as the row's prompt id picks; half of the rows play fair (a tool result, a second turn, done)
HOSTILE_CODE = '''
import os, zlib
CASES = ["loops", "crashes", "floods", "shadow", "data_dir", "malformed"] + ["fair"] * 6

def reset(row):
    return [{"role": "user", "content": "Say anything."}]

def step(messages, row):
    case = CASES[zlib.crc32(str(row["prompt_id"]).encode()) % len(CASES)]
    if case == "loops":
        while True:
            pass
    if case == "crashes":
        os._exit(7)
    if case == "floods":
        print("x" * 200000)
    if case == "shadow":
        return {"messages": [{"role": "user", "content": open("/etc/shadow").read()}], "done": False}
    if case == "data_dir":
        return {"messages": [{"role": "user", "content": open(DATA_FILE).read()}], "done": False}
    if case == "malformed":
        return {"messages": "nope", "done": False}
    if sum(1 for m in messages if m["role"] == "assistant") < 2:  # fair: a tool result, then one more turn
        return {"messages": [{"role": "tool", "content": "RESULT-" + str(row["prompt_id"]), "name": "lookup",
                              "tool_call_id": "call_1_0"}], "done": False}
    return {"messages": [], "reward": 1.0, "done": True}
'''
REASONS = {"time limit exceeded", "exited with status 7", "printed", "No such file or directory",
           "must be a list of messages"}


def test_a_hostile_environment_fails_its_episodes_and_the_jobs_go_on(agentic_platform: Platform) -> None:
    platform = agentic_platform
    data_file = Path(platform.env["STREAMRL_DATA_DIR"]) / "secret-of-the-platform.txt"
    data_file.write_text("CANARY-agentic\n")
    data_file.chmod(0o644)
    code = HOSTILE_CODE.replace("DATA_FILE", json.dumps(str(data_file)))
    hostile = platform.submit(mode="sync", environment={"type": "python", "code": code, "step_timeout_s": 1.0},
                              dataset={"builtin": "arithmetic", "num_prompts": 64, "eval_prompts": 0},
                              algorithm={"name": "grpo", "group_size": 2},
                              generation={"instances": 1, "batch_size": 16, "max_tokens": 4},
                              training={"iterations": 3, "prompts_per_iteration": 8, "micro_batch_size": 16},
                              failover={"reward_error_rate": 1.0}, telemetry={"samples_per_iteration": 64})

    other_team = platform.backend.make_team(max_concurrent_jobs=2, max_generation_instances=2)
    other_user = platform.backend.make_user(other_team)
    with platform.backend.session() as session:
        team, user = session.get(Team, other_team.id), session.get(User, other_user.id)
        assert team is not None and user is not None
        session.add(Model(team_id=team.id, name="tiny", path=_model_path(platform), created_by_id=user.id))
        session.flush()
        spec = JobSpec.model_validate({**_calculator_job("sync"), "name": "beside", "model": "tiny", "seed": 0,
                                       "training": {"iterations": 2, "prompts_per_iteration": 2,
                                                    "micro_batch_size": 16, "eval_every": 0},
                                       "algorithm": {"name": "grpo", "group_size": 4}})
        beside = int(create_job(session=session, team=team, user=user, spec=spec).id)

    platform.wait_done(hostile, timeout_s=400)
    other = wait_until(lambda: (j := platform.job(beside)).status in (JobStatus.succeeded, JobStatus.failed) and j,
                       400, "the other team's job to end", platform.logs_tail)
    assert other.status == JobStatus.succeeded, other.error

    samples = _api_samples(platform, hostile, platform.backend.auth_headers(platform.user, platform.team))
    assert len(samples) == 3 * 8 * 2
    errors = [s["reward_error"] for s in samples if s["reward_error"]]
    fair = [s for s in samples if not s["reward_error"]]
    assert fair and all(s["reward"] == 1.0 and s["episode"]["turns"] == 2 for s in fair)
    assert all(_check_masks(s) == 1 for s in fair)  # the tool's result is context in every stored fair episode
    assert all(e.startswith("environment step: ") for e in errors), errors
    assert all(s["reward"] == 0.0 and s["episode"]["end"] == "error" for s in samples if s["reward_error"])
    seen = {reason for reason in REASONS if any(reason in e for e in errors)}
    assert len(seen) >= 4, errors  # the cases the prompts drew, each named
    assert not any("CANARY" in e for e in errors)
    assert any("environment step" in e for e in platform.events(hostile))
    with platform.backend.client() as api:  # the other team sees none of it
        answer = api.get(f"/api/v1/jobs/{hostile}/samples",
                         headers=platform.backend.auth_headers(other_user, other_team))
    assert answer.status_code == 404


def _model_path(platform: Platform) -> str:
    with platform.backend.session() as session:
        return str(session.scalars(select(Model.path).where(Model.team_id == platform.team.id,
                                                            Model.name == "tiny")).one())
