"""MLflow through its REST API (no MLflow SDK in the control plane): an experiment per `experiment` name, a run per
job with the spec as params and as `spec.json`, metrics per iteration (step = iteration), and at the end the final
checkpoint under `checkpoint/`. Artifacts go through the tracking server's artifact proxy (`mlflow server`'s
default `--serve-artifacts`; run artifact URIs `mlflow-artifacts:/...`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from backend.trackers.base import JobInfo, Row, TrackerDown, TrackerSink, flat_params

API = "/api/2.0/mlflow"
ARTIFACTS_API = "/api/2.0/mlflow-artifacts/artifacts"
BATCH_METRICS = 1000  # MLflow's limit per log-batch request
BATCH_PARAMS = 100
STATUS = {"succeeded": "FINISHED", "failed": "FAILED", "cancelled": "KILLED"}


class MlflowSink(TrackerSink):
    def __init__(self, job: JobInfo, tracking_uri: str, experiment: str, run_name: str, *, token: str | None = None,
                 username: str | None = None, password: str | None = None, timeout_s: float = 10.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        """`transport`: the egress policy's (backend/services/egress.py) on the control plane."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        auth = httpx.BasicAuth(username, password or "") if username else None
        self.http = httpx.Client(base_url=tracking_uri.rstrip("/"), headers=headers, auth=auth, timeout=timeout_s,
                                 transport=transport, trust_env=transport is None, follow_redirects=False)
        self.job, self.experiment, self.run_name = job, experiment, run_name
        self.run_id: str | None = None
        self.artifact_root: str | None = None  # path under the artifact proxy, or None when not proxied

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise TrackerDown(f"{type(exc).__name__}: {exc}") from exc
        if response.status_code >= 400:  # the answer's text stays out: the error is shown to the team
            detail = "RESOURCE_DOES_NOT_EXIST" if "RESOURCE_DOES_NOT_EXIST" in response.text[:2000] else ""
            raise TrackerDown(f"HTTP {response.status_code} on {path}" + (f": {detail}" if detail else ""))
        return response.json() if response.content else {}

    def _experiment_id(self) -> str:
        try:
            found = self._call("GET", f"{API}/experiments/get-by-name", params={"experiment_name": self.experiment})
            return str(found["experiment"]["experiment_id"])
        except TrackerDown as exc:
            if "RESOURCE_DOES_NOT_EXIST" not in str(exc):
                raise
        return str(self._call("POST", f"{API}/experiments/create", json={"name": self.experiment})["experiment_id"])

    def start(self, run_ref: str | None) -> str:
        if run_ref is not None:
            info = self._call("GET", f"{API}/runs/get", params={"run_id": run_ref})["run"]["info"]
        else:
            tags = [{"key": "streamrl.job_id", "value": str(self.job.id)},
                    {"key": "streamrl.team", "value": self.job.team}, {"key": "mlflow.runName", "value": self.run_name}]
            info = self._call("POST", f"{API}/runs/create", json={
                "experiment_id": self._experiment_id(), "run_name": self.run_name,
                "start_time": int(time.time() * 1000), "tags": tags})["run"]["info"]
        self.run_id = str(info["run_id"])
        uri = str(info.get("artifact_uri", ""))
        self.artifact_root = uri.removeprefix("mlflow-artifacts:").lstrip("/") if uri.startswith("mlflow-artifacts:") \
            else None
        if run_ref is None:
            params = [{"key": k, "value": v} for k, v in flat_params(self.job.spec).items()]
            for start in range(0, len(params), BATCH_PARAMS):
                self._call("POST", f"{API}/runs/log-batch", json={"run_id": self.run_id,
                                                                  "params": params[start:start + BATCH_PARAMS]})
            self._upload("spec.json", json.dumps(self.job.spec, indent=2).encode())
        return self.run_id

    def log_rows(self, rows: list[Row]) -> None:
        metrics = [{"key": key, "value": value, "timestamp": int(row.at.timestamp() * 1000), "step": row.iteration}
                   for row in rows for key, value in row.metrics.items()]
        for start in range(0, len(metrics), BATCH_METRICS):
            self._call("POST", f"{API}/runs/log-batch", json={"run_id": self.run_id,
                                                              "metrics": metrics[start:start + BATCH_METRICS]})

    def _upload(self, path: str, content: bytes | Any) -> None:
        if self.artifact_root is None:
            return  # the server does not proxy artifacts: metrics and params still go in
        self._call("PUT", f"{ARTIFACTS_API}/{self.artifact_root}/{path}", content=content,
                   timeout=httpx.Timeout(600.0, connect=10.0))

    def finish(self, status: str, checkpoint: Path | None) -> None:
        if checkpoint is not None and checkpoint.is_dir():
            for file in sorted(p for p in checkpoint.rglob("*") if p.is_file()):
                with file.open("rb") as content:
                    self._upload(f"checkpoint/{file.relative_to(checkpoint).as_posix()}", content)
        self._call("POST", f"{API}/runs/update", json={"run_id": self.run_id, "status": STATUS.get(status, "FINISHED"),
                                                        "end_time": int(time.time() * 1000)})

    def close(self) -> None:
        self.http.close()
