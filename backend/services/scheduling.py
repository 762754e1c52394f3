"""Scheduling rules at submission: a job's priority within its team's `max_priority`, `preemptible: false` for admins.

A spec that leaves `priority` unset (every Tinker and OpenAI fine-tuning session, and jobs that do not ask) gets the
default, lowered to the team's maximum; one that asks for more than the maximum is a 422 naming both.
"""

from __future__ import annotations

from backend.db.enums import Role
from backend.db.models import Team
from backend.services.errors import InvalidInput
from contract.scheduling import DEFAULT_PRIORITY, PRIORITY_RANK
from contract.spec import JobSpec


def team_priority(team: Team, spec: JobSpec) -> JobSpec:
    """`spec` with its priority checked against (or, when unset, lowered to) the team's `max_priority`."""
    most = team.max_priority if team.max_priority in PRIORITY_RANK else DEFAULT_PRIORITY
    if "priority" not in spec.model_fields_set:
        if PRIORITY_RANK[spec.priority] > PRIORITY_RANK[most]:
            return spec.model_copy(update={"priority": most})
        return spec
    if PRIORITY_RANK[spec.priority] > PRIORITY_RANK[most]:
        raise InvalidInput(f"priority {spec.priority!r} is above the team's max_priority {most!r} (a team admin "
                           f"can raise it: PATCH /teams/current/quotas)", loc=("body", "priority"))
    return spec


def check_preemptible(role: Role, spec: JobSpec) -> None:
    """Only team admins may submit a job the scheduler cannot hand back."""
    if not spec.preemptible and not role.at_least(Role.admin):
        raise InvalidInput(f"preemptible: false is for team admins only (your role: {role.value}); leave it true "
                           "and the job may be handed back at a checkpoint and resumed from there",
                           loc=("body", "preemptible"))
