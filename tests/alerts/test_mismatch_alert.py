"""The `mismatch_high` training signal (backend/services/signals.py) and the `training_mismatch` alert: a rule
subscribed to it is notified of that check alone; a `training_signal` rule of every check; a rule with both gets
one delivery (on a real Postgres)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from backend.db.models import AlertDelivery, AlertRule, Job
from backend.services.jobs import record_event
from backend.services.signals import MISMATCH_KL_LIMIT, WINDOW, History, check_history
from contract import events

GRPO = {"algorithm": {"name": "grpo", "group_size": 8}}


def _history(mismatch: list[float]) -> History:
    rows = [{"reward_mean": 0.1 * i, "reward_std": 0.2, "reward_flat_groups": 0.2, "mismatch_kl": value}
            for i, value in enumerate(mismatch)]
    return History(newest=[(i + 1, m) for i, m in reversed(list(enumerate(rows)))][:3], count=len(rows),
                   reward_min=0.0, reward_max=0.1 * len(rows), first_reward=0.0)


def test_mismatch_check_fires_on_a_window_of_high_mismatch() -> None:
    high = MISMATCH_KL_LIMIT * 3
    [signal] = check_history(_history([1e-6, high, high, high]), GRPO)
    assert signal.check == "mismatch_high" and signal.severity == "warning" and signal.since_iteration == 2
    assert "is_mask" in signal.message and f"{high:.3g}" in signal.message
    assert check_history(_history([high] * (WINDOW - 1)), GRPO) == []  # one or two odd iterations never fire
    assert check_history(_history([high, high, MISMATCH_KL_LIMIT / 2]), GRPO) == []
    assert check_history(_history([1e-7] * 5), GRPO) == []


def test_alert_events_of_a_mismatch_signal() -> None:
    assert events.alert_events_of(events.TRAINING_SIGNAL, {"check": "mismatch_high"}) == \
        ("training_mismatch", "training_signal")
    assert events.alert_events_of(events.TRAINING_SIGNAL, {"check": "kl_blowup"}) == ("training_signal",)
    assert events.alert_events_of("worker", {}) == ()


def test_mismatch_rule_gets_the_mismatch_signal_only(pg_backend: Any) -> None:
    team = pg_backend.make_team()
    with pg_backend.session() as session:
        job = Job(team_id=team.id, name="bf16", spec={}, status="running", target_instances=1)
        rules = {name: AlertRule(team_id=team.id, name=name, events=subscribed, channel="webhook",
                                 url="https://example.invalid/hook", recipients=[])
                 for name, subscribed in (("mismatch", ["training_mismatch"]), ("signals", ["training_signal"]),
                                          ("both", ["training_signal", "training_mismatch"]))}
        session.add_all([job, *rules.values()])
    with pg_backend.session() as session:
        record_event(session=session, job_id=job.id, kind=events.TRAINING_SIGNAL, message="mismatch high",
                     data={"check": "mismatch_high"})
        record_event(session=session, job_id=job.id, kind=events.TRAINING_SIGNAL, message="kl blew up",
                     data={"check": "kl_blowup"})
    with pg_backend.session() as session:
        got = {name: [d.event for d in session.scalars(select(AlertDelivery).where(AlertDelivery.rule_id == rule.id)
                                                        .order_by(AlertDelivery.id))]
               for name, rule in rules.items()}
    assert got == {"mismatch": ["training_mismatch"], "signals": ["training_signal", "training_signal"],
                   "both": ["training_mismatch", "training_signal"]}
