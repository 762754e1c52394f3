"""Job event kinds other parts act on: alert rules subscribe to them (backend/services/alerts.py), the dashboard
shows them. Every writer records events through `Reporter.record_event` or `backend.services.jobs.record_event`, so a
kind written anywhere reaches the alert rules."""

from __future__ import annotations

from typing import Literal

STATUS = "status"  # a job state change; data: {"from": <status>, "to": <status>}
STALLED = "stalled"  # a running job made no iteration for its stall limit; the message says why
RECOVERED = "recovered"  # iterations again after a stall
TRAINING_SIGNAL = "training_signal"  # a training-signal check warns (no learning signal); data: {"check": <name>}
TRAINING_SIGNAL_CLEARED = "training_signal_cleared"  # that check stopped firing; data: {"check": <name>}
TRACKER = "tracker"  # an experiment tracker went down (metrics are buffered) or came back (the buffer was flushed)
# usage budgets (backend/controller/budgets.py); data: {"budget": <limit's name>, "limit", "used", "scope": job|team}
BUDGET_WARNING = "budget_warning"  # the job or its team used 80% of a limit
BUDGET_EXCEEDED = "budget_exceeded"  # 100%: the controller paused the job (it resumes when the limit is raised)
BUDGET_RESUMED = "budget_resumed"  # the limit has room again: the controller resumed the job it paused
LIMITS = "limits"  # a job's `limits` changed (PATCH /jobs/{id}); data: {<name>: {"from", "to"}}

# What a notification rule can subscribe to, and the job events that trigger each.
# `training_mismatch`: the `mismatch_high` training signal alone (it also counts as a `training_signal`).
AlertEvent = Literal["job_failed", "job_succeeded", "job_stalled", "training_signal", "training_mismatch", "budget"]
ALERT_EVENTS: tuple[AlertEvent, ...] = ("job_failed", "job_succeeded", "job_stalled", "training_signal",
                                        "training_mismatch", "budget")
MISMATCH_CHECK = "mismatch_high"  # backend/services/signals.py


def alert_event_of(kind: str, data: dict | None) -> AlertEvent | None:
    """The alert a job event triggers, if any."""
    if kind == STATUS and data is not None:
        return {"failed": "job_failed", "succeeded": "job_succeeded"}.get(str(data.get("to")))  # type: ignore[return-value]
    if kind == STALLED:
        return "job_stalled"
    if kind == TRAINING_SIGNAL:
        return "training_signal"
    if kind in (BUDGET_WARNING, BUDGET_EXCEEDED):
        return "budget"
    return None


def alert_events_of(kind: str, data: dict | None) -> tuple[AlertEvent, ...]:
    """Every alert a job event triggers, most specific first: a `mismatch_high` training signal is both
    `training_mismatch` and `training_signal` (a rule subscribed to both gets one delivery)."""
    alert = alert_event_of(kind, data)
    if alert is None:
        return ()
    if alert == "training_signal" and data is not None and data.get("check") == MISMATCH_CHECK:
        return ("training_mismatch", alert)
    return (alert,)
