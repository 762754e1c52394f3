"""A python reward that never returns, on real workers: every call is cut at its `timeout_s`, each failure is a
`reward_error` event as it happens, and the controller fails the job once the error rate over
`failover.reward_error_window_s` passes `failover.reward_error_rate` (contract/reward_window.py), long before the
first iteration's rewards have all timed out."""

from __future__ import annotations

import pytest
from runtime_platform import Platform, wait_until

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
