"""Training-signal checks (backend/services/signals.py) on their own and through the health answer, the runs table
and the controller's signal events (backend/controller/signal_events.py), on a real Postgres; the stall clock of a
resumed job."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from backend.controller.signal_events import note_signals
from backend.db.enums import InstanceStatus, JobStatus
from backend.db.models import GenerationInstance, Iteration, Job, JobEvent
from backend.services.health import MIN_STALL_S
from backend.services.job_data import record_iteration
from backend.services.jobs import transition_job
from backend.services.signals import CLEAR_AFTER, NEWEST, STUCK_ITERATIONS, History, check_history, cleared
from contract import events

API = "/api/v1"
GRPO = {"algorithm": {"name": "grpo", "group_size": 8}, "generation": {"max_tokens": 64}}


def _history(rows: list[dict[str, Any]]) -> History:
    """Rows oldest first, as the job recorded them."""
    rewards = [r["reward_mean"] for r in rows if "reward_mean" in r]
    return History(newest=[(i + 1, m) for i, m in reversed(list(enumerate(rows)))][:3], count=len(rows),
                   reward_min=min(rewards, default=None), reward_max=max(rewards, default=None),
                   first_reward=rows[0].get("reward_mean"), first_entropy=rows[0].get("entropy"))


def _checks(rows: list[dict[str, Any]], spec: dict[str, Any] = GRPO) -> list[str]:
    return [signal.check for signal in check_history(_history(rows), spec)]


def test_each_check_fires_on_its_pattern_and_not_on_a_learning_run() -> None:
    learning = [{"reward_mean": 0.1 * i, "reward_std": 0.2, "reward_flat_groups": 0.25, "truncated_fraction": 0.4,
                 "kl": 0.01, "entropy": 1.5, "loss": 0.1, "grad_norm": 1.0} for i in range(30)]
    assert _checks(learning) == []
    flat = [{"reward_mean": 0.0, "reward_std": 0.0, "reward_flat_groups": 1.0} for _ in range(3)]
    assert _checks(flat) == ["reward_constant"]
    assert _checks(flat[:2]) == []  # one or two odd iterations never fire a check
    # groups flat but rewards differ between groups: GRPO still has nothing; a critic-free batch algorithm would not
    grouped_flat = [{"reward_mean": 0.5, "reward_std": 0.5, "reward_flat_groups": 1.0} for _ in range(3)]
    assert _checks(grouped_flat) == ["reward_constant"]
    assert _checks(grouped_flat, {"algorithm": {"name": "ppo", "group_size": 1}}) == []
    assert _checks([{"reward_mean": 0.3, "reward_std": 0.1, "truncated_fraction": 1.0}] * 3) == ["all_truncated"]
    stuck = [{"reward_mean": 0.25, "reward_std": 0.1, "reward_flat_groups": 0.5}] * STUCK_ITERATIONS
    assert _checks(stuck) == ["reward_stuck"] and _checks(stuck[:-1]) == []
    assert _checks([{"reward_mean": 0.2, "reward_std": 0.1, "kl": 3.0}] * 3) == ["kl_blowup"]
    collapse = [{"reward_mean": 0.2, "reward_std": 0.1, "entropy": 2.0}] + [
        {"reward_mean": 0.2 + i, "reward_std": 0.1, "entropy": 0.001} for i in range(3)]
    assert _checks(collapse) == ["entropy_collapse"]
    nan = [*learning[:5], {"reward_mean": 0.2, "reward_std": 0.1, "loss": None, "grad_norm": math.nan}]
    signals = check_history(_history(nan), GRPO)
    assert [s.check for s in signals] == ["nan_loss"] and signals[0].severity == "error"
    assert "iteration 6" in signals[0].message


def _running(backend: Any, job_id: int, *, started_ago_s: float = 0.0) -> None:
    with backend.session() as session:
        job = session.get(Job, job_id)
        transition_job(session=session, job=job, to=JobStatus.starting)
        transition_job(session=session, job=job, to=JobStatus.running)
        job.started_at = datetime.now(UTC) - timedelta(seconds=started_ago_s)
        session.add(GenerationInstance(job_id=job_id, instance_id="gen-0", status=InstanceStatus.running,
                                       heartbeat_at=datetime.now(UTC)))


def _iterations(backend: Any, job_id: int, rows: list[dict[str, Any]], first: int = 1, ago_s: float = 0.0) -> None:
    with backend.session() as session:
        for i, metrics in enumerate(rows, start=first):
            row = record_iteration(session=session, job_id=job_id, iteration=i, metrics=metrics)
            session.flush()
            session.execute(Iteration.__table__.update().where(Iteration.id == row.id)
                            .values(created_at=datetime.now(UTC) - timedelta(seconds=ago_s)))


def _events(backend: Any, job_id: int, *kinds: str) -> list[JobEvent]:
    with backend.session() as session:
        rows = session.scalars(select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.kind.in_(kinds))
                               .order_by(JobEvent.id)).all()
        session.expunge_all()
        return list(rows)


def test_zero_reward_job_is_not_healthy_in_health_runs_and_events(app_client: TestClient, world: Any) -> None:
    job = world.submit(app_client, name="zero-reward", generation={"instances": 1})
    _running(world.backend, job["id"])
    flat = {"reward_mean": 0.0, "reward_std": 0.0, "reward_flat_groups": 1.0, "truncated_fraction": 1.0}
    _iterations(world.backend, job["id"], [flat] * 3)

    health = app_client.get(f"{API}/jobs/{job['id']}/health", headers=world.headers("viewer")).json()
    assert health["state"] == "training_signal" and not health["healthy"]
    assert [s["check"] for s in health["signals"]] == ["reward_constant", "all_truncated"]
    assert health["summary"] == health["signals"][0]["message"]
    assert "reward is constant within every group (0.000)" in health["summary"]
    runs = app_client.get(f"{API}/runs", headers=world.headers("viewer")).json()["data"]
    row = next(r for r in runs if r["id"] == job["id"])
    assert [s["check"] for s in row["health"]["signals"]] == ["reward_constant", "all_truncated"]

    with world.backend.session() as session:
        assert note_signals(session) >= 2
    with world.backend.session() as session:
        note_signals(session)  # nothing changed: no second event
    fired = _events(world.backend, job["id"], events.TRAINING_SIGNAL, events.TRAINING_SIGNAL_CLEARED)
    assert [(e.kind, (e.data or {}).get("check")) for e in fired] == [
        ("training_signal", "reward_constant"), ("training_signal", "all_truncated")]
    assert fired[0].message == health["signals"][0]["message"]

    learning = {"reward_mean": 0.4, "reward_std": 0.3, "reward_flat_groups": 0.5, "truncated_fraction": 0.5}
    _iterations(world.backend, job["id"], [learning] * 3, first=4)
    with world.backend.session() as session:
        note_signals(session)
    cleared = _events(world.backend, job["id"], events.TRAINING_SIGNAL, events.TRAINING_SIGNAL_CLEARED)[2:]
    assert sorted((e.kind, (e.data or {}).get("check")) for e in cleared) == [
        ("training_signal_cleared", "all_truncated"), ("training_signal_cleared", "reward_constant")]
    assert app_client.get(f"{API}/jobs/{job['id']}/health", headers=world.headers("viewer")).json()["state"] \
        == "generating"


def test_signal_events_do_not_flap_on_a_series_that_keeps_crossing_the_line(app_client: TestClient,
                                                                          world: Any) -> None:
    """#36 finding 14b: hysteresis. Iterations recorded one at a time, the controller's pass after each: truncated
    three times then once not, five times over, fires one warning and no "signal back" (it flapped 11 times); only
    CLEAR_AFTER good iterations in a row clear it, once. A plain alternating series never fires."""
    cut = {"reward_mean": 0.3, "reward_std": 0.2, "reward_flat_groups": 0.5, "truncated_fraction": 1.0}
    fine = {**cut, "truncated_fraction": 0.5}
    crossing = world.submit(app_client, name="crossing", generation={"instances": 1})
    alternating = world.submit(app_client, name="alternating", generation={"instances": 1})
    series = {crossing["id"]: [cut, cut, cut, fine] * 5 + [fine] * CLEAR_AFTER, alternating["id"]: [cut, fine] * 10}
    for job_id in series:
        _running(world.backend, job_id)
    for i in range(max(len(rows) for rows in series.values())):
        for job_id, rows in series.items():
            if i < len(rows):
                _iterations(world.backend, job_id, [{**rows[i], "reward_mean": 0.1 + 0.01 * i}], first=i + 1)
        with world.backend.session() as session:
            note_signals(session)
        if i == len(series[crossing["id"]]) - CLEAR_AFTER - 1:  # the last crossing, before the good run
            assert len(_events(world.backend, crossing["id"], events.TRAINING_SIGNAL_CLEARED)) == 0
    fired = _events(world.backend, crossing["id"], events.TRAINING_SIGNAL, events.TRAINING_SIGNAL_CLEARED)
    assert [(e.kind, (e.data or {}).get("check")) for e in fired] == [
        ("training_signal", "all_truncated"), ("training_signal_cleared", "all_truncated")]
    assert _events(world.backend, alternating["id"], events.TRAINING_SIGNAL, events.TRAINING_SIGNAL_CLEARED) == []


def test_a_fired_check_clears_only_after_enough_good_iterations() -> None:
    cut = {"reward_mean": 0.3, "reward_std": 0.2, "truncated_fraction": 1.0}
    fine = {**cut, "truncated_fraction": 0.2}

    def history(rows: list[dict[str, Any]]) -> History:
        return History(newest=[(i + 1, m) for i, m in reversed(list(enumerate(rows)))][:NEWEST], count=len(rows))

    assert not cleared(history([cut] * 3 + [fine] * (CLEAR_AFTER - 1)), "all_truncated", GRPO)
    assert not cleared(history([cut] * 3 + [fine, cut, fine]), "all_truncated", GRPO)
    assert cleared(history([cut] * 3 + [fine] * CLEAR_AFTER), "all_truncated", GRPO)
    assert cleared(history([cut] * 3), "reward_stuck", GRPO)  # a whole-history check clears as soon as it stops


def test_a_resumed_job_is_not_stalled_by_the_time_it_was_paused(app_client: TestClient, world: Any) -> None:
    job = world.submit(app_client, name="paused-long", generation={"instances": 1})
    _running(world.backend, job["id"], started_ago_s=MIN_STALL_S + 500)
    _iterations(world.backend, job["id"], [{"reward_mean": 0.1, "reward_std": 0.1}], ago_s=MIN_STALL_S + 400)
    headers = world.headers("member")
    stalled = app_client.get(f"{API}/jobs/{job['id']}/health", headers=headers).json()
    assert stalled["state"] == "stalled" and stalled["summary"].startswith("no iteration for ")  # not "stalled: .."
    assert app_client.post(f"{API}/jobs/{job['id']}/pause", headers=headers).status_code == 200
    paused = app_client.get(f"{API}/jobs/{job['id']}/health", headers=headers).json()
    assert paused["state"] == "paused"
    assert app_client.post(f"{API}/jobs/{job['id']}/resume", headers=headers).status_code == 200
    health = app_client.get(f"{API}/jobs/{job['id']}/health", headers=headers).json()
    assert health["state"] == "generating", health["summary"]
    assert health["seconds_since_progress"] < 60


def test_a_flat_run_raises_reward_flat_and_a_learning_run_does_not(app_client: TestClient, world: Any) -> None:
    """The issue's LoRA run: reward 0.30-0.32 for 20+ iterations while ~93% of samples are truncated, no other check
    fires (groups differ, losses finite): the health answer says the job is flat, and a signal event is recorded."""
    from backend.services.signals import FLAT_ITERATIONS

    flat = world.submit(app_client, name="lora-flat", generation={"instances": 1}, training={"lora": {"rank": 8}})
    _running(world.backend, flat["id"])
    rows = [{"reward_mean": 0.30 + 0.02 * ((i * 7) % 5) / 4, "reward_std": 0.25, "samples": 64.0,
             "reward_flat_groups": 0.4, "truncated_fraction": 0.93, "loss": 0.1, "grad_norm": 1.0}
            for i in range(FLAT_ITERATIONS)]
    _iterations(world.backend, flat["id"], rows[:-1])
    health = app_client.get(f"{API}/jobs/{flat['id']}/health", headers=world.headers("viewer")).json()
    assert health["signals"] == []  # one iteration short of the window: not yet
    _iterations(world.backend, flat["id"], rows[-1:], first=FLAT_ITERATIONS)
    health = app_client.get(f"{API}/jobs/{flat['id']}/health", headers=world.headers("viewer")).json()
    assert [s["check"] for s in health["signals"]] == ["reward_flat"] and health["state"] == "training_signal"
    assert "moved 0.020" in health["summary"] and "LoRA adapter" in health["summary"], health["summary"]
    with world.backend.session() as session:
        note_signals(session)
    fired = _events(world.backend, flat["id"], events.TRAINING_SIGNAL)
    assert [(e.data or {}).get("check") for e in fired] == ["reward_flat"]

    rising = world.submit(app_client, name="full-rising", generation={"instances": 1})
    _running(world.backend, rising["id"])
    _iterations(world.backend, rising["id"], [{**row, "reward_mean": 0.34 + 0.11 * i / FLAT_ITERATIONS}
                                              for i, row in enumerate(rows)])
    health = app_client.get(f"{API}/jobs/{rising['id']}/health", headers=world.headers("viewer")).json()
    assert health["signals"] == [], health["signals"]
