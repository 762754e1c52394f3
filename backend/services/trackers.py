"""A team's tracker connections (URLs shown, secrets encrypted and never returned) and, at submit, the tracker runs
of a job: a job may name a tracker only when its team can reach it (mlflow: a tracking URI; wandb online: an API
key). The runs are mirrored by the controller (backend/trackers/sync.py)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.db.models import Job, Team, TrackerCredential, TrackerRun
from backend.schemas.trackers import SECRETS, SETTINGS, TrackerCredentialsPublic, TrackerCredentialsUpdate
from backend.services.egress import EgressRefused, check_url
from backend.services.errors import InvalidInput, not_found
from backend.services.secret_box import seal, unseal
from contract.settings import Settings
from contract.spec import JobSpec

SECRETS_SET = "secrets_set"  # kept in `settings`: the names of the stored secrets (never their values)
URL_SETTING = {"mlflow": "tracking_uri", "wandb": "base_url"}  # the server a connection's secrets are sent to
CREDENTIAL_SETTINGS = ("username",)  # not secret, but a credential: dropped with the secrets when the URL changes


def public(row: TrackerCredential) -> TrackerCredentialsPublic:
    shown = {k: v for k, v in row.settings.items() if k != SECRETS_SET}
    stored = set(row.settings.get(SECRETS_SET, []))
    return TrackerCredentialsPublic(kind=row.kind, **shown,
                                    secrets={name: name in stored for name in SECRETS[row.kind]},
                                    updated_at=row.updated_at)


def list_credentials(*, session: Session, team: Team) -> list[TrackerCredential]:
    return list(session.scalars(select(TrackerCredential).where(TrackerCredential.team_id == team.id)
                                .order_by(TrackerCredential.kind)))


def _row(session: Session, team_id: int, kind: str) -> TrackerCredential | None:
    return session.scalar(select(TrackerCredential).where(TrackerCredential.team_id == team_id,
                                                          TrackerCredential.kind == kind))


def set_credentials(*, session: Session, team: Team, kind: str, body: TrackerCredentialsUpdate,
                    settings: Settings) -> TrackerCredential:
    """Create or change a connection. Its server URL must pass the egress policy (422 naming the field); a new URL
    drops the stored secrets not given in the same request, so they never go to a host they were not given for."""
    given = body.model_dump(exclude_unset=True)
    foreign = sorted(set(given) - set(SETTINGS[kind]) - set(SECRETS[kind]))
    if foreign:
        raise InvalidInput(f"{', '.join(foreign)} {'is' if len(foreign) == 1 else 'are'} not {kind} settings "
                           f"(expected: {', '.join(SETTINGS[kind] + SECRETS[kind])})", loc=("body", foreign[0]))
    row = _row(session, team.id, kind) or TrackerCredential(team_id=team.id, kind=kind, settings={})
    url_field = URL_SETTING[kind]
    if given.get(url_field):
        try:
            check_url(given[url_field], settings)
        except EgressRefused as exc:
            raise InvalidInput(f"`{url_field}` is refused: {exc}", loc=("body", url_field)) from None
    moved = url_field in given and given[url_field] != row.settings.get(url_field)
    kept = {k: v for k, v in row.settings.items() if not (moved and k in CREDENTIAL_SETTINGS)}
    values = {**kept, **{k: v for k, v in given.items() if k in SETTINGS[kind]}}
    if kind == "mlflow" and not values.get("tracking_uri"):
        raise InvalidInput("an mlflow connection needs `tracking_uri`", loc=("body", "tracking_uri"))
    secrets = unseal(settings.secret_key, row.secrets_encrypted) if row.secrets_encrypted and not moved else {}
    secrets.update({k: v for k, v in given.items() if k in SECRETS[kind] and v is not None})
    secrets = {k: v for k, v in secrets.items() if v}  # "" clears a secret
    row.settings = {**values, SECRETS_SET: sorted(secrets)}
    row.secrets_encrypted = seal(settings.secret_key, secrets) if secrets else None
    session.add(row)
    session.flush()
    return row


def delete_credentials(*, session: Session, team: Team, kind: str) -> None:
    row = _row(session, team.id, kind)
    if row is None:
        raise not_found("tracker connection", kind)
    session.delete(row)
    session.flush()


def connection(session: Session, team_id: int, kind: str, platform_secret: str) -> dict[str, Any]:
    """Settings and secrets together (for the sync loop only): {} when the team has none."""
    row = _row(session, team_id, kind)
    if row is None:
        return {}
    secrets = unseal(platform_secret, row.secrets_encrypted) if row.secrets_encrypted else {}
    return {**{k: v for k, v in row.settings.items() if k != SECRETS_SET}, **secrets}


def register_runs(*, session: Session, team: Team, job: Job, spec: JobSpec) -> None:
    """At submit: refuse trackers the team cannot reach (422 naming the tracker), else a run row for each."""
    for index, tracker in enumerate(spec.telemetry.trackers):
        loc = ("body", "telemetry", "trackers", index)
        stored = _row(session, team.id, tracker.type) if tracker.type != "tensorboard" else None
        if tracker.type == "mlflow" and stored is None:
            raise InvalidInput("the team has no MLflow connection: an admin sets one with PUT /trackers/mlflow "
                               "(`streamrl trackers set mlflow --tracking-uri URL`)", loc=loc)
        if tracker.type == "wandb" and (tracker.mode or "online") == "online" and \
                "api_key" not in (stored.settings.get(SECRETS_SET, []) if stored else []):
            raise InvalidInput("wandb online needs the team's W&B API key (PUT /trackers/wandb); or use "
                               "mode: offline", loc=loc)
        session.add(TrackerRun(job_id=job.id, tracker=tracker.type))
    session.flush()


def job_runs(*, session: Session, job: Job) -> list[TrackerRun]:
    return list(session.scalars(select(TrackerRun).where(TrackerRun.job_id == job.id).order_by(TrackerRun.id)))
