"""A job whose reward is a judge + string_check `multi`, on real workers: the generation instance loads the judge (a
tiny chat model rewired to reply one digit) next to the policy, scores each batch of samples with it, the iteration
rows carry the scoring time (`reward_seconds`) and the samples the sub-scores; POST /graders/run's pool path answers
through a real generation worker (the `generation.run_grader` task)."""

from __future__ import annotations

from pathlib import Path

import pytest
from grader_models import build_digit_judge
from runtime_platform import Platform
from sqlalchemy import select

from backend.db import JobSample, Model
from backend.schemas.graders import GraderRunRequest, GraderSample
from backend.services.graders import run_grader

pytestmark = [pytest.mark.integration]
OUT = "{{ sample.output_text }}"
REWARD = {"type": "multi", "params": {"graders": {
    "judge": {"type": "judge", "model": "judge", "range": [0, 10], "max_tokens": 1,
              "input": [{"role": "user", "content": "Grade 0-10: " + OUT}]},
    "exact": {"type": "string_check", "input": OUT, "reference": "{{ item.answer }}", "operation": "eq"},
}, "calculate_output": "judge / 10 + exact"}}


def test_a_judge_multi_grader_scores_a_job_on_its_instances(platform: Platform, tmp_path: Path) -> None:
    judge_dir = build_digit_judge(tmp_path / "judge")
    with platform.backend.session() as session:
        session.add(Model(team_id=platform.team.id, name="judge", path=str(judge_dir), created_by_id=platform.user.id))
    job_id = platform.submit(mode="sync", reward=REWARD, generation={"instances": 1},
                             training={"iterations": 2, "prompts_per_iteration": 4})
    platform.wait_done(job_id, timeout_s=400)
    rows = platform.iterations(job_id)
    assert len(rows) == 2 and all(row["reward_errors"] == 0 for row in rows), rows
    assert sum(row["reward_seconds"] for row in rows) > 0, rows  # the judge's time in the iteration breakdown
    with platform.backend.session() as session:
        stored = list(session.scalars(select(JobSample).where(JobSample.job_id == job_id)))
    assert stored
    for sample in stored:
        parts = sample.reward_components or {}
        assert parts["judge"] in (3.0, 7.0) and parts["exact"] in (0.0, 1.0), parts
        assert sample.reward == pytest.approx(parts["judge"] / 10 + parts["exact"])

    body = GraderRunRequest(grader=REWARD, sample=GraderSample(output_text="4"), item={"answer": "4"})
    with platform.backend.session() as session:
        result = run_grader(body, session=session, team_id=platform.team.id, client=platform.client, timeout_s=180)
    assert result.error is None and result.sub_rewards["exact"] == 1.0 and result.sub_rewards["judge"] in (3.0, 7.0)
