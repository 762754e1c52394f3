"""A python reward scores a batch on several jails at once and hands each outcome back as it is ready
(workers/rewards/lanes.py); an abandoned batch leaves nothing running."""

from __future__ import annotations

import threading
import time

import pytest

from workers.rewards import build_reward
from workers.rewards.jail import missing_piece
from workers.rewards.lanes import MAX_WIDTH, lane_width
from workers.rewards.sandbox import PythonReward

needs_jail = pytest.mark.skipif(missing_piece() is not None, reason=f"no jail here: {missing_piece()}")
SLOW_ON_HANG = "import time\ndef reward(p, r, m):\n    if r == 'hang':\n        time.sleep(3600)\n    return 1.0\n"


def test_width_stays_within_the_cpus_and_the_memory_budget() -> None:
    assert 1 <= lane_width(256) <= MAX_WIDTH
    assert lane_width(4096) == 1  # two 4 GB address spaces would pass the budget


@needs_jail
def test_outcomes_come_as_they_are_ready_not_after_the_slowest() -> None:
    reward = PythonReward(SLOW_ON_HANG, timeout_s=3.0, width=2)
    try:
        items = [("p", "hang", {}), ("p", "ok", {}), ("p", "ok", {}), ("p", "ok", {})]
        order = [index for index, _ in reward.score_each(items)]
        assert sorted(order) == [0, 1, 2, 3] and order[-1] == 0, order  # the hung call did not hold the others
        outcomes = reward.score_many(items)
        assert [o.value for o in outcomes] == [0.0, 1.0, 1.0, 1.0]
        assert "time limit exceeded (3s" in (outcomes[0].error or "")
        assert len(reward.lanes.workers) == 2 and reward.restarts == 2
    finally:
        reward.close()


@needs_jail
def test_a_composite_hands_back_a_failing_sandboxed_part_as_it_happens() -> None:
    with build_reward({"type": "composite", "components": [
            {"type": "python", "code": SLOW_ON_HANG, "params": {"timeout_s": 2}},
            {"type": "exact_match"}]}) as reward:
        got = list(reward.score_each([("p", "hang", {"answer": "x"}), ("p", "ok", {"answer": "ok"})]))
        if reward.parts[0][2].lanes.width > 1:  # the hung sample's lane did not hold the other's
            assert [index for index, _ in got] == [1, 0], got
        outcomes = dict(got)
        assert outcomes[1].value == 2.0 and outcomes[1].error is None
        assert "python: time limit exceeded" in (outcomes[0].error or "")


@needs_jail
def test_a_cancelled_batch_kills_its_running_calls_and_the_reward_goes_on() -> None:
    reward = PythonReward(SLOW_ON_HANG, timeout_s=60.0, width=2)
    try:
        assert reward.score("p", "ok", {}).value == 1.0  # the jail is up
        cancel = threading.Event()
        got: list[int] = []
        done = threading.Event()

        def score() -> None:
            got.extend(index for index, _ in reward.score_each([("p", "hang", {})] * 4, cancel))
            done.set()

        threading.Thread(target=score, daemon=True).start()
        time.sleep(0.5)  # the calls are running (a 60 s time limit each)
        started = time.monotonic()
        cancel.set()
        assert done.wait(30), "the cancelled batch still runs"
        assert got == []
        # the hung calls were killed, not left to their 60 s: the lanes take the next batch at once
        assert [o.value for o in reward.score_many([("p", "ok", {})] * 3)] == [1.0, 1.0, 1.0]
        assert time.monotonic() - started < 30
    finally:
        reward.close()
