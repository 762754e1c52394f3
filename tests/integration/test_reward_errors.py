"""A python reward that never returns, on real workers: every call is cut at its `timeout_s`, each failure is a
`reward_error` event as it happens, and the controller fails the job once the error rate over
`failover.reward_error_window_s` passes `failover.reward_error_rate` (contract/reward_window.py), long before the
first iteration's rewards have all timed out."""

from __future__ import annotations

import time

import pytest
import redis
from runtime_platform import Platform, wait_until

from contract import keys
from contract.states import JobStatus

pytestmark = [pytest.mark.integration, pytest.mark.slow]
HANGS = "import time\n\ndef reward(prompt, response, meta):\n    time.sleep(3600)\n    return 1.0\n"


def test_a_reward_that_never_returns_fails_the_job_on_its_error_rate(platform: Platform) -> None:
    # one iteration = 16 prompts x 4 = 64 rewards of 1 s each on 2 instances: about 30 s before the old rule (every
    # reward of an iteration failed) could fire; the error-rate rule needs 8 failed rewards
    job_id = platform.submit(mode="sync", reward={"type": "python", "code": HANGS, "params": {"timeout_s": 1}},
                             generation={"instances": 2, "max_tokens": 8},
                             training={"iterations": 3, "prompts_per_iteration": 16},
                             failover={"reward_error_rate": 0.5, "reward_error_window_s": 30})
    job = wait_until(lambda: (j := platform.job(job_id)).status == JobStatus.failed and j, 300, "the job to fail",
                     platform.logs_tail)
    assert job.error.startswith("reward errors: ") and "failover.reward_error_rate 0.5" in job.error, job.error
    assert "time limit exceeded" in job.error, job.error
    assert job.current_iteration == 0, "failed only after a whole iteration of timeouts"
    events = platform.events(job_id)
    errors = [e for e in events if e.startswith("reward failed on gen-")]
    assert errors and "time limit exceeded" in errors[0], events
    assert events.index(errors[0]) < next(i for i, e in enumerate(events) if "-> failed" in e), events


def _reading(platform: Platform, job_id: int, instance_id: str) -> bool:
    """The instance has read prompts of its stream (they are generating; scoring follows within a second)."""
    stream = keys.prompt_stream(job_id, instance_id)
    try:
        return any(int(group["pending"]) > 0 for group in platform.client.xinfo_groups(stream))
    except redis.ResponseError:  # no stream yet
        return False


def test_a_reward_that_never_returns_is_an_event_within_seconds_and_a_failed_job_stops_scoring(
        platform: Platform) -> None:
    """#36 findings 11 and 14c: one instance, one batch of 32 samples, a reward sleeping forever cut at 10 s. The first
    reward_error event comes within 15 s of generation starting (the batch is scored on several jails at once and
    each failure is reported as it happens; one after another it came after 32 x 10 s), and once the job failed
    on its error rate the instance stops scoring within a few seconds (it went on with the rest of the batch)."""
    job_id = platform.submit(mode="sync", reward={"type": "python", "code": HANGS, "params": {"timeout_s": 10}},
                             generation={"instances": 1, "batch_size": 32, "max_tokens": 4},
                             training={"iterations": 2, "prompts_per_iteration": 8},  # x group_size 4 = 32 samples
                             failover={"reward_error_rate": 0.5, "reward_error_window_s": 120})
    wait_until(lambda: _reading(platform, job_id, "gen-0"), 300, "the instance to read its prompts", platform.logs_tail)
    reading_at = time.monotonic()
    events = wait_until(lambda: [e for e in platform.events(job_id) if e.startswith("reward failed on gen-0")], 60,
                        "a reward_error event", platform.logs_tail)
    took = time.monotonic() - reading_at
    assert took <= 15, f"the first reward_error event came {took:.1f}s after generation started"
    assert "time limit exceeded (10s wall clock)" in events[0], events

    job = wait_until(lambda: (j := platform.job(job_id)).status == JobStatus.failed and j, 240, "the job to fail",
                     platform.logs_tail)
    assert job.error.startswith("reward errors: "), job.error
    failed_at = time.monotonic()
    wait_until(lambda: platform.statuses(job_id).get("gen-0") in ("stopped", "dead"), 60,
               "the failed job's instance to stop", platform.logs_tail)
    took = time.monotonic() - failed_at
    assert took <= 8, f"the failed job's instance went on scoring for {took:.1f}s"
