"""Download a Hub model (id + revision) once into the artifact store, in a background thread of the API process.

    start_download(session_factory, model_id, settings)   # the model row is `downloading`; returns at once

`huggingface_hub.snapshot_download` fetches only weights, config and tokenizer files (`ALLOW_PATTERNS`) into the
model's own directory (`local_dir`): a download that stopped (a restarted API) resumes from the partial files when
`resume_downloads` starts it again. Progress (bytes on disk / the files' total from a dry run) is written to the row
every `PROGRESS_EVERY_S`. The directory is validated like any other (backend/services/model_card.py) before the row
becomes `ready` and, with an object store (STREAMRL_ARTIFACTS=s3://...), uploaded under the team's prefix like an
uploaded model (workers on other hosts read it from there); any failure leaves it `failed` with the reason. A host
that cannot reach the Hub fails within the client's timeouts (HF_HUB_DOWNLOAD_TIMEOUT, 10 s by default) with a reason
saying so, never a hang; with HF_HUB_OFFLINE=1 it fails at once. The endpoint is settings.hub_endpoint, else
HF_ENDPOINT, else huggingface.co; it must pass the egress policy (backend/services/egress.py: a loopback or private
mirror is named in STREAMRL_EGRESS_ALLOW) or the row fails at once with the reason.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.db.models import Model, Team
from backend.services.egress import EgressRefused, Policy, policy_of
from backend.services.model_card import ModelInvalid, inspect_model_dir
from backend.services.secret_box import unseal
from contract.artifact_store import ArtifactStoreError
from contract.artifact_store.models import TEAM_MODELS_DIR, upload_model
from contract.settings import Settings

log = logging.getLogger(__name__)
ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "*.tiktoken"]
PROGRESS_EVERY_S = 1.0
SessionFactory = Callable[[], Session]


def _update(session_factory: SessionFactory, model_id: int, **values: Any) -> None:
    with session_factory() as session:
        model = session.get(Model, model_id)
        if model is not None:
            for key, value in values.items():
                setattr(model, key, value)
            session.commit()


def bytes_on_disk(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def reason_of(exc: Exception, endpoint: str | None, *, what: str = "model",
              instead: str = "Register a model directory or upload an archive instead") -> str:
    """A user-facing reason: what failed and what to do (`what`: model or dataset; `instead`: the offline way)."""
    from huggingface_hub.errors import (
        DryRunError,
        GatedRepoError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    while isinstance(exc, DryRunError) and isinstance(exc.__cause__, Exception):
        exc = exc.__cause__  # the dry run hides the Hub's answer (or the network error) as its cause
    where = endpoint or "the Hugging Face Hub"
    unreachable = any(word in type(exc).__name__ for word in ("Connect", "Timeout")) or isinstance(exc, OSError)
    if isinstance(exc, GatedRepoError):
        return f"the {what} is gated: accept its terms on the Hub and set the team's Hub token (PUT /models/hub-token)"
    if isinstance(exc, RepositoryNotFoundError):
        return f"no such {what} on {where} (or it is private: set the team's Hub token)"
    if isinstance(exc, RevisionNotFoundError):
        return f"no such revision on {where}"
    if unreachable or isinstance(exc, OfflineModeIsEnabled | LocalEntryNotFoundError | DryRunError):
        return f"cannot reach {where}: this host is offline (HF_HUB_OFFLINE, or no network). {instead}"
    text = str(exc).splitlines()[0][:300] if str(exc) else exc.__class__.__name__
    return f"download from {where} failed: {exc.__class__.__name__}: {text}"


def endpoint_refusal(endpoint: str | None, policy: Policy) -> str | None:
    """Why the egress policy refuses the Hub endpoint (the operator's, else HF_ENDPOINT, else huggingface.co): a
    loopback or private mirror must be on STREAMRL_EGRESS_ALLOW. None: downloads may go ahead."""
    from huggingface_hub import constants

    url = endpoint or constants.ENDPOINT
    try:
        policy.check_url(url)
    except EgressRefused as exc:
        return f"the Hub endpoint {url} is refused by the egress policy: {exc}"
    return None


def download_model(session_factory: SessionFactory, model_id: int, *, artifact_dir: Path, endpoint: str | None,
                   token: str | None, policy: Policy) -> None:
    """The background task: download, validate, record `ready` + card or `failed` + reason.

    It writes only into this server's `<artifact_dir>/team-models/<team>/<model>/`: a row whose path is elsewhere
    (another deployment's artifact dir on a shared database) is left alone."""
    from huggingface_hub import snapshot_download

    with session_factory() as session:
        model = session.get(Model, model_id)
        if model is None or model.state != "downloading":
            return
        hub_id, revision, dest, team_id = str(model.hub_id), model.revision or "main", Path(model.path), model.team_id
        own_dir = artifact_dir.resolve() / TEAM_MODELS_DIR / str(model.team_id) / str(model.id)
    if dest.resolve() != own_dir:
        log.warning("model %s: %s is not %s; not downloaded by this server", model_id, dest, own_dir)
        return
    refused = endpoint_refusal(endpoint, policy)
    if refused is not None:
        _update(session_factory, model_id, state="failed", error=refused)
        return
    dest.mkdir(parents=True, exist_ok=True)
    done = threading.Event()
    try:
        plan = snapshot_download(hub_id, revision=revision, local_dir=dest, allow_patterns=ALLOW_PATTERNS,
                                 token=token, endpoint=endpoint, dry_run=True)
        total = sum(int(getattr(f, "file_size", 0) or 0) for f in plan) if isinstance(plan, list) else 0
        _update(session_factory, model_id, progress={"done_bytes": bytes_on_disk(dest), "total_bytes": total})

        def report() -> None:
            while not done.wait(PROGRESS_EVERY_S):
                _update(session_factory, model_id, progress={"done_bytes": min(bytes_on_disk(dest), total or 1 << 62),
                                                             "total_bytes": total})

        threading.Thread(target=report, name=f"model-{model_id}-progress", daemon=True).start()
        snapshot_download(hub_id, revision=revision, local_dir=dest, allow_patterns=ALLOW_PATTERNS, token=token,
                          endpoint=endpoint)
        done.set()
        card = inspect_model_dir(dest)
        # with an object store, workers on hosts without this disk read the model from there (as an uploaded one)
        upload_model(team_id, model_id, dest, artifact_dir)
    except ArtifactStoreError as exc:
        done.set()
        _update(session_factory, model_id, state="failed", error=f"the downloaded model could not be stored: {exc}")
        return
    except ModelInvalid as exc:
        done.set()
        _update(session_factory, model_id, state="failed", error=f"the downloaded model is not usable: {exc.detail}")
        return
    except Exception as exc:  # recorded on the row: the user sees why, the API goes on
        done.set()
        log.warning("model %s: download of %s@%s failed: %r", model_id, hub_id, revision, exc)
        _update(session_factory, model_id, state="failed", error=reason_of(exc, endpoint))
        return
    _update(session_factory, model_id, state="ready", card=card, error=None,
            progress={"done_bytes": card["disk_bytes"], "total_bytes": card["disk_bytes"]})


def team_hub_token(session_factory: SessionFactory, team_id: int | None, settings: Settings) -> str | None:
    """The team's Hub token, unsealed for a download (never stored or returned in the clear)."""
    with session_factory() as session:
        team = session.get(Team, team_id) if team_id is not None else None
        sealed = team.hub_token_sealed if team is not None else None
    return unseal(settings.secret_key, sealed) if sealed else None


def start_download(session_factory: SessionFactory, model_id: int, settings: Settings) -> threading.Thread:
    with session_factory() as session:
        model = session.get(Model, model_id)
        team_id = model.team_id if model is not None else None
    token = team_hub_token(session_factory, team_id, settings)
    thread = threading.Thread(target=download_model, args=(session_factory, model_id),
                              kwargs={"artifact_dir": settings.artifacts, "endpoint": settings.hub_endpoint,
                                      "token": token, "policy": policy_of(settings)},
                              name=f"model-{model_id}-download", daemon=True)
    thread.start()
    return thread


def resume_downloads(session_factory: SessionFactory, settings: Settings) -> list[threading.Thread]:
    """Restart the downloads a stopped API left `downloading` (they resume from the files on disk)."""
    with session_factory() as session:
        ids = list(session.scalars(select(Model.id).where(Model.state == "downloading")))
    return [start_download(session_factory, model_id, settings) for model_id in ids]
