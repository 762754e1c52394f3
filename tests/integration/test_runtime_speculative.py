"""A sync job with `generation.speculative: group` on the real platform (workers, Redis, Postgres) learns exactly like
one with `off`: seeded sampling emits the same tokens with and without speculation (engines/hf_speculative.py), so
the samples, rewards and losses agree; its iterations record the drafts. (A random tiny model drafts poorly: how
much speculation saves is bench/speculative.py's question, on an SFT-warmed model.)"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from backend.db import JobSample

pytestmark = [pytest.mark.integration]
SHAPE = {"training": {"iterations": 2, "prompts_per_iteration": 2, "micro_batch_size": 4, "lr": 1e-3},
         "algorithm": {"group_size": 4}, "generation": {"instances": 1, "batch_size": 16, "max_tokens": 32,
                                                      "temperature": 0.1},
         "dataset": {"builtin": "long_tail", "num_prompts": 8, "eval_prompts": 0}}


def run(platform, speculative: str) -> tuple[dict[str, str], list[dict]]:  # type: ignore[no-untyped-def]
    shape = {**SHAPE, "generation": {**SHAPE["generation"], "speculative": speculative}}
    job_id = platform.submit(mode="sync", **shape)
    platform.wait_done(job_id, timeout_s=300)
    with platform.backend.session() as session:
        rows = session.scalars(select(JobSample).where(JobSample.job_id == job_id))
        samples = {row.sample_id: row.response for row in rows}
    return samples, platform.iterations(job_id)


def test_group_speculation_learns_like_none(platform) -> None:  # type: ignore[no-untyped-def]
    plain_samples, plain = run(platform, "off")
    spec_samples, spec = run(platform, "group")
    assert len(plain_samples) == 16 and spec_samples == plain_samples
    for off, group in zip(plain, spec, strict=True):
        assert group["loss"] == pytest.approx(off["loss"], rel=1e-4, abs=1e-6)
        assert group["reward_mean"] == off["reward_mean"]
        assert off["tokens_per_forward"] == 1.0 and "spec_acceptance" not in off
    assert any("spec_acceptance" in it for it in spec)  # the instance verified drafts (the tail: <= 4 of 16 rows)
    assert all(it["tokens_per_forward"] >= 1.0 and "tail_phase_seconds" in it for it in spec)
