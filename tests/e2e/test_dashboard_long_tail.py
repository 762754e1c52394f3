"""The long-tail card draws every sample's recorded length, not the few stored samples.

An iteration is recorded through the runtime's own path (workers/runtime/recorder.py `IterationRecorder.finish`:
the metrics row with every sample's length and truncation flag, plus the stored samples, which are the first to
finish and so the shortest), written with backend.services.job_data like `DatabaseReporter` does. The card's p50,
p99 and max must match the row's `len_p50` / `len_p99` / `len_max` within one histogram bin, and its truncated share
must equal `truncated_fraction`.
"""

from __future__ import annotations

import math
import re
import uuid

import pytest
import redis
from e2e_support import PASSWORD, MakeApi, Server, open_signed_in, shot
from playwright.sync_api import Page, expect

from contract.reporter import MemoryReporter
from contract.sample import Sample
from contract.spec_operations import TelemetrySpec
from workers.runtime.recorder import IterationRecorder

pytestmark = pytest.mark.e2e

MAX_TOKENS = 48
BINS = 24  # LengthHistogram's bin count


def long_tail_samples(job_id: int, iteration: int) -> list[Sample]:
    """64 samples in finish order: most answer in 8-20 tokens, a tail runs to the 48-token cut-off."""
    lengths = [8 + (k % 13) for k in range(52)] + [30 + 2 * k for k in range(6)] + [MAX_TOKENS] * 6
    return [Sample(job_id=job_id, prompt_id=f"p{k}", group_id=f"{iteration}-{k // 4}", sample_id=f"{iteration}-{k}",
                   policy_version=iteration - 1, prompt_ids=[1, 2], response_ids=[5] * n, behaviour_logprobs=[-1.0] * n,
                   finish_reason="length" if n >= MAX_TOKENS else "stop", prompt_text=f"{k}+{k}=",
                   response_text="x" * n, reward=float(k % 2), truncated=n >= MAX_TOKENS, finished_at=float(n))
            for k, n in enumerate(lengths)]


def record(server: Server, job_id: int, iteration: int) -> dict[str, object]:
    from backend.db.session import make_engine, session_scope
    from backend.services.job_data import record_iteration, record_samples
    from backend.services.live import publish_live

    memory = MemoryReporter()
    recorder = IterationRecorder(job_id, "trainer", memory, TelemetrySpec())
    row = recorder.finish(iteration - 1, long_tail_samples(job_id, iteration), {"loss": 0.1}, {})
    kept = memory.samples[job_id]
    assert len(kept) == 8 and max(s["length"] for s in kept) < row["len_p50"]  # the stored ones are the shortest
    engine = make_engine(server.env["STREAMRL_DATABASE_URL"])
    try:
        with session_scope(engine) as session:
            record_iteration(session=session, job_id=job_id, iteration=iteration, metrics=row)
            record_samples(session=session, job_id=job_id, samples=kept)
    finally:
        engine.dispose()
    client = redis.Redis.from_url(server.env["STREAMRL_REDIS_URL"])
    try:
        publish_live(client, job_id, "metrics", {"iteration": iteration, "metrics": row})
        publish_live(client, job_id, "samples", kept)
    finally:
        client.close()
    return row


def stat(text: str, name: str) -> float:
    match = re.search(rf"{name} (\d+(?:\.\d+)?)", text)
    assert match, f"{name} not in {text!r}"
    return float(match.group(1))


def test_long_tail_card_draws_every_recorded_length(page: Page, api_server: Server, make_api: MakeApi) -> None:
    tag = uuid.uuid4().hex[:8]
    api = make_api()
    session = api.register(f"tail-{tag}@example.com", PASSWORD, f"team-tail-{tag}")
    api.post("/models", json={"name": "tiny-1m", "path": str(api_server.tiny_model_dir)})
    job = api.post("/jobs", json={"name": "long-tail", "model": "tiny-1m",
                                  "dataset": {"builtin": "arithmetic", "num_prompts": 32},
                                  "generation": {"max_tokens": MAX_TOKENS}, "training": {"iterations": 3}})
    try:
        record(api_server, job["id"], 1)
        row = record(api_server, job["id"], 2)
        open_signed_in(page, api_server, session["token"], f"/jobs/{job['id']}")
        stats = page.get_by_test_id("length-stats")
        expect(stats).to_contain_text("p99/p50 skew")
        expect(page.get_by_label("length scope")).to_contain_text("64 recorded")
        text = stats.inner_text()
        width = math.ceil((float(row["len_max"]) + 1) / BINS)
        for name, key in (("p50", "len_p50"), ("p99", "len_p99"), ("max", "len_max")):
            assert abs(stat(text, name) - float(row[key])) <= width, (name, text, row[key])
        cut = page.get_by_test_id("truncated").inner_text()
        share = float(row["truncated_fraction"])
        assert f"{share * 100:.0f}% truncated ({round(share * 64)})" in cut, (cut, share)
        shot(page, "39-long-tail")
        # the stored samples alone: the shortest, which is what the card used to draw by default
        page.get_by_label("length scope").select_option("stored")
        expect(stats).not_to_contain_text(f"max {int(row['len_max'])}")
    finally:
        api.post(f"/jobs/{job['id']}/cancel")
