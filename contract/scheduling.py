"""Scheduling classes a job or session can ask for (JobSpec.priority): the names both sides use.

The scheduler (backend/scheduler) orders waiting items by class first; a team may ask for at most its
`max_priority` quota (set by an admin; default normal).
"""

from __future__ import annotations

from typing import Literal

Priority = Literal["low", "normal", "high"]
PRIORITIES: dict[str, dict[str, str]] = {  # lowest first; the dashboard's labels (OpenAPI `x-choices`)
    "low": {"label": "low (runs on spare slots, preempted first)"},
    "normal": {"label": "normal"},
    "high": {"label": "high (may preempt lower-priority jobs at their next checkpoint)"},
}
PRIORITY_RANK = {name: rank for rank, name in enumerate(PRIORITIES)}
DEFAULT_PRIORITY: Priority = "normal"
