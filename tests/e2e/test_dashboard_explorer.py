"""The trajectory explorer in a browser: samples a real trainer step recorded (per-token behaviour and trainer
logprobs, versions, advantage, mismatch) read token by token in the sample browser; the filters (reward, staleness,
mismatch) narrow the table; two samples of a group diff from where they diverge; the job page charts the mismatch."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch
from e2e_runs import finished_run, new_team, record
from e2e_support import Server, open_signed_in, shot
from playwright.sync_api import Page, expect
from sqlalchemy import Engine

from backend.db.session import session_scope
from backend.services.job_data import record_samples
from contract.sample import Sample
from contract.spec import JobSpec
from workers.runtime.recorder import sample_row
from workers.training.batch import collate, policy_forward
from workers.training.trainer import Trainer

pytestmark = pytest.mark.e2e


def _trained_rows(server: Server, job_id: int) -> tuple[list[dict[str, Any]], dict[str, float], Trainer,
                                                        list[Sample]]:
    """One real optimizer step on four samples of one group (two fresh with behaviour = the trainer's logprobs
    minus 0.5, two sampled by an older version) and the sample rows the runtime stores for them."""
    spec = JobSpec.model_validate({"model": str(server.tiny_model_dir), "dataset": {"builtin": "arithmetic"},
                                   "algorithm": {"group_size": 4}, "training": {"micro_batch_size": 4}})
    trainer = Trainer(server.tiny_model_dir, spec)
    rng = random.Random(0)
    prompt = [1] + [rng.randrange(4, 90) for _ in range(4)]
    responses = [[11, 12, 13, 14, 15], [11, 12, 40, 41], [20, 21, 22], [11, 30, 31, 32, 33, 34]]
    samples = [Sample(job_id=job_id, prompt_id="p", group_id="g", sample_id=f"{job_id}:s{i}",
                      policy_version=0 if i < 2 else -1, prompt_ids=prompt, response_ids=ids,
                      behaviour_logprobs=[0.0] * len(ids), finish_reason="stop", reward=[1.0, 0.0, 1.0, 0.0][i],
                      prompt_text="What is 2 + 3?", response_text=str(trainer.tokenizer.decode(ids)))
               for i, ids in enumerate(responses)]
    with torch.no_grad():
        exact = policy_forward(trainer.model, collate(samples, trainer.pad_id), 1.0).logprobs
    for index, sample in enumerate(samples):
        sample.behaviour_logprobs = [float(v) - 0.5 for v in exact[index, : len(sample.response_ids)]]
    trainer.micro_step(samples)
    metrics = trainer.optimizer_step()
    rows = [sample_row(s, 0, trainer.token_trace(s)) for s in samples]
    for index, row in enumerate(rows):  # stored as the job's iteration 2 (trained at version 1): fresh ones sampled
        row["iteration"], row["policy_version"] = 2, 1 if index < 2 else 0  # by version 1, stale ones by 0
        row["tokens"]["trained_version"], row["tokens"]["versions"] = 1, [[0, row["policy_version"]]]
    return rows, metrics, trainer, samples


def test_per_token_view_filters_and_group_diff(page: Page, api_server: Server, engine: Engine) -> None:
    world = new_team(api_server, "explorer")
    job = finished_run(engine, world, "bf16-run", [0.2, 0.6])
    rows, metrics, trainer, samples = _trained_rows(api_server, job["id"])
    assert metrics["mismatch_tokens"] == 9  # the two fresh samples' tokens (5 + 4)
    record(engine, job["id"], 3, {"reward_mean": 0.5, "mismatch_kl": metrics["mismatch_kl"],
                                  "mismatch_abs_mean": metrics["mismatch_abs_mean"],
                                  "mismatch_out_fraction": metrics["mismatch_out_fraction"]}, None)
    with session_scope(engine) as session:
        record_samples(session=session, job_id=job["id"], samples=rows)

    open_signed_in(page, api_server, world.token, f"/jobs/{job['id']}")
    expect(page.get_by_test_id("mismatch-chart")).to_be_visible()
    browser = page.get_by_test_id("samples")
    expect(browser.locator("tbody tr")).to_have_count(4)
    page.get_by_label("min mismatch").fill("0.01")  # the two stale samples have no on-policy token: no mismatch
    expect(browser.locator("tbody tr")).to_have_count(2)
    page.get_by_label("min mismatch").fill("")
    page.get_by_label("staleness filter").select_option("stale")
    expect(browser.locator("tbody tr")).to_have_count(2)
    page.get_by_label("staleness filter").select_option("any")
    page.get_by_label("min reward").fill("1")
    expect(browser.locator("tbody tr")).to_have_count(2)
    page.get_by_label("min reward").fill("")

    first = rows[0]
    page.get_by_label("policy version").fill("1")  # fresh, reward 1: the first sample alone
    page.get_by_label("min reward").fill("1")
    expect(browser.locator("tbody tr")).to_have_count(1)
    browser.locator("tbody tr").first.click()
    page.get_by_label("policy version").fill("")
    page.get_by_label("min reward").fill("")
    trace = page.get_by_test_id("sample-detail").get_by_test_id("token-trace")
    tokens = trace.get_by_test_id("token-row")
    expect(tokens).to_have_count(len(samples[0].response_ids))
    current = trainer.traces[samples[0].sample_id].current
    for index in (0, 4):  # behaviour, current, delta (-0.5 + 0.5 = current - behaviour = +0.5), version, loss
        cells = tokens.nth(index).locator("td")
        expect(cells.nth(2)).to_have_text(f"{samples[0].behaviour_logprobs[index]:.4f}")
        expect(cells.nth(3)).to_have_text(f"{current[index]:.4f}")
        expect(cells.nth(4)).to_have_text("0.5000")
        expect(cells.nth(5)).to_have_text("1")
        expect(cells.nth(6)).to_have_text("trained")
    expect(trace.get_by_test_id("trace-advantage")).to_have_text(f"{first['tokens']['advantage']:.3f}")
    trace.get_by_label("diff with sample").select_option(rows[1]["sample_id"])
    diff = trace.get_by_test_id("sample-diff")
    expect(diff).to_contain_text("agree on their first 2 tokens")  # [11, 12, 13, ...] vs [11, 12, 40, ...]
    expect(diff.locator("mark")).to_have_count(2)
    shot(page, "70-trajectory-explorer")
