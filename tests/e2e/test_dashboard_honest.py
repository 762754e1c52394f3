"""Truth fixes of issue 39: the team's own shared LoRA process is named as its own (Cluster page and `streamrl
cluster`), no training-signal verdict before there is data, a warning at the scale control when the target exceeds
the generation pool, and the held-out reward charted on the job page."""

from __future__ import annotations

import json
import time

import pytest
import redis
from e2e_runs import World, new_team, record, running_run
from e2e_support import Server, open_signed_in, shot
from playwright.sync_api import Page, expect
from sqlalchemy import Engine

from contract import keys, tasks

pytestmark = pytest.mark.e2e


def cli_held_by(world: World, node: str) -> str:
    """What `streamrl cluster` prints in the worker's held_by column (its formatter, on the API's answer)."""
    from streamrl.cli.cluster import _holder

    worker = next(w for w in world.api.get("/cluster")["workers"] if w["node"] == node)
    return ", ".join(_holder(h) for h in worker["holders"])


def test_own_shared_process_is_named_as_the_teams_own(page: Page, api_server: Server, engine: Engine) -> None:
    world = new_team(api_server, "shared-own")
    job = running_run(engine, world, "lora-shared")
    client = redis.Redis.from_url(api_server.env["STREAMRL_REDIS_URL"])
    key, node = f"test-{world.tag}-0", f"generation-shared-{world.tag}"
    # what a worker running a shared generation process registers (streamrl/worker_stats.py active_tasks: args[0]
    # of generation.run_shared is the process's key) and the process's heartbeat with its members
    client.set(keys.worker_registry(node), json.dumps({
        "node": node, "queues": ["generation"], "slots": 1, "host": "h", "pid": 1, "beat_at": time.time(),
        "tasks": [{"task": tasks.RUN_SHARED, "job_id": key}]}), ex=60)
    client.set(keys.share_state(key), json.dumps({"pid": 1, "host": "h", "node": node, "at": time.time(),
                                                   "members": [[job["id"], "gen-0"]]}), ex=60)
    try:
        open_signed_in(page, api_server, world.token, "/cluster")
        own = page.get_by_test_id(f"worker-{node}").get_by_test_id("own-shared")
        expect(own).to_contain_text(f"your team's shared LoRA process ({tasks.RUN_SHARED}) serving job {job['id']}")
        expect(page.get_by_test_id(f"worker-{node}")).not_to_contain_text("another team")
        shot(page, "39-cluster-own-shared")
        assert cli_held_by(world, node) == f"shared LoRA process (your jobs {job['id']})"
        other = new_team(api_server, "shared-other")  # a team with no member job: not its own, not named
        assert cli_held_by(other, node) == "shared (other teams)"
    finally:
        client.delete(keys.worker_registry(node), keys.share_state(key))
        client.close()
        world.api.post(f"/jobs/{job['id']}/cancel")


def test_no_verdict_before_data_scale_warning_and_eval_chart(page: Page, api_server: Server, engine: Engine) -> None:
    world = new_team(api_server, "honest")
    job = running_run(engine, world, "no-data-yet", generation={"instances": 8})
    try:
        open_signed_in(page, api_server, world.token, f"/jobs/{job['id']}")
        expect(page.get_by_test_id("signals-none")).to_contain_text("No iteration recorded yet")
        expect(page.get_by_test_id("signals-none")).not_to_contain_text("the reward varies")
        # 8 instances (the quota): more than any test cluster's generation slots (none, or a worker's few)
        expect(page.get_by_test_id("scale-capacity-warning")).to_contain_text("generation")
        for i in (1, 2, 3):
            record(engine, job["id"], i, {"reward_mean": 0.1 * i, "reward_std": 0.2, "loss": 0.5,
                                          "eval_reward": 0.05 * i}, None)
        page.reload()
        expect(page.get_by_test_id("signals-none")).to_contain_text("No check fires")
        reward_card = page.locator(".card", has=page.get_by_text("Reward and KL", exact=True))
        expect(reward_card).to_contain_text("held-out reward")
        shot(page, "39-honest-job")
    finally:
        world.api.post(f"/jobs/{job['id']}/cancel")
