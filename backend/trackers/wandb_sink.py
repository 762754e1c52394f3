"""Weights & Biases through its SDK (the optional extra `streamrl[trackers]`, imported only when a job asks for
wandb): a run per job (id kept, so a restarted controller resumes it), the spec as config, metrics per iteration.
`offline` runs write their directory under `<artifact_dir>/jobs/<id>/trackers/wandb/` (`wandb sync` uploads it)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from backend.trackers.base import JobInfo, Row, TrackerDown, TrackerSink, TrackerUnavailable

INIT_TIMEOUT_S = 30.0


def _wandb() -> Any:
    try:
        import wandb
    except ImportError:
        raise TrackerUnavailable("the wandb package is not installed on the control plane: "
                                 "pip install 'streamrl[trackers]' where the controller runs") from None
    return wandb


class WandbSink(TrackerSink):
    def __init__(self, job: JobInfo, project: str, run_name: str, mode: str, *, entity: str | None = None,
                 api_key: str | None = None, base_url: str | None = None) -> None:
        self.job, self.project, self.run_name, self.mode = job, project, run_name, mode
        self.entity, self.api_key, self.base_url = entity, api_key, base_url
        self.dir = job.artifacts / "trackers" / "wandb"
        self.run: Any = None

    def start(self, run_ref: str | None) -> str:
        wandb = _wandb()
        run_id = run_ref or f"streamrl-{self.job.id}-{uuid.uuid4().hex[:8]}"
        self.dir.mkdir(parents=True, exist_ok=True)
        options: dict[str, Any] = {"silent": True, "init_timeout": INIT_TIMEOUT_S, "x_disable_stats": True,
                                   "x_disable_machine_info": True, "console": "off"}
        if self.api_key:
            options["api_key"] = self.api_key
        if self.base_url:
            options["base_url"] = self.base_url
        try:
            self.run = wandb.init(project=self.project, entity=self.entity, id=run_id, name=self.run_name,
                                  config=self.job.spec, dir=str(self.dir), mode=self.mode, resume="allow",
                                  reinit="create_new", settings=wandb.Settings(**options))
        except Exception as exc:  # wandb raises its own error types for network and auth failures
            raise TrackerDown(f"wandb.init: {type(exc).__name__}: {exc}") from exc
        return run_id

    def log_rows(self, rows: list[Row]) -> None:
        try:
            for row in rows:
                self.run.log(row.metrics, step=row.iteration)
        except Exception as exc:
            raise TrackerDown(f"wandb log: {type(exc).__name__}: {exc}") from exc

    def finish(self, status: str, checkpoint: Path | None) -> None:
        self.run.finish(exit_code=0 if status == "succeeded" else 1)
        self.run = None

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None
