"""`StreamRLClient`: a small typed client for every route in docs/api.md (REST v1).

Methods return the decoded JSON body (`dict`), or `None` for 204 answers. A non-2xx answer raises `APIError` with
the server's detail; an unreachable server raises `ConnectionFailed`. The client is a context manager.

    with StreamRLClient("http://127.0.0.1:8000", token) as api:
        job = api.submit_job(spec)
        for ev in api.stream_job(job["id"]):
            print(ev.event, ev.data)
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from backend.client.alerts import AlertsClient
from backend.client.errors import APIError, ConnectionFailed
from backend.client.sse import SSEEvent, parse_sse
from backend.client.trackers import TrackersClient

API_PREFIX = "/api/v1"
JSON = dict[str, Any]
TERMINAL_STATUSES = ("succeeded", "failed", "cancelled")


def _drop_none(params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


class StreamRLClient(AlertsClient, TrackersClient):
    def __init__(self, base_url: str, token: str | None = None, *, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, transport=transport)

    # ---- plumbing -----------------------------------------------------------------------------------------------
    def __enter__(self) -> StreamRLClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def _send(self, method: str, path: str, *, prefix: str = API_PREFIX, **kwargs: Any) -> httpx.Response:
        url = f"{prefix}{path}"
        try:
            response = self._http.request(method, url, headers=self._headers(), **kwargs)
        except httpx.TransportError as exc:
            raise ConnectionFailed(self.base_url, str(exc) or type(exc).__name__) from exc
        _raise_for_status(response, method, url)
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._send(method, path, **kwargs)
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    # ---- health ---------------------------------------------------------------------------------------------------
    def health(self) -> JSON:
        return self._json("GET", "/health")

    def ready(self) -> JSON:
        return self._json("GET", "/ready")

    def metrics_text(self, metrics_token: str) -> str:
        """Prometheus text; needs the server's STREAMRL_METRICS_TOKEN (not a user's token)."""
        try:
            response = self._http.get("/metrics", headers={"Authorization": f"Bearer {metrics_token}"})
        except httpx.TransportError as exc:
            raise ConnectionFailed(self.base_url, str(exc) or type(exc).__name__) from exc
        _raise_for_status(response, "GET", "/metrics")
        return response.text

    # ---- auth -----------------------------------------------------------------------------------------------------
    def register(self, email: str, password: str, team_name: str) -> JSON:
        return self._json("POST", "/auth/register", json={"email": email, "password": password, "team_name": team_name})

    def login(self, email: str, password: str, team_id: int | None = None) -> JSON:
        """Password login; on success the client uses the returned session token from then on."""
        answer = self._json("POST", "/auth/login", json=_drop_none(
            {"email": email, "password": password, "team_id": team_id}))
        self.token = answer["token"]
        return answer

    def switch_team(self, team_id: int) -> JSON:
        answer = self._json("POST", "/auth/switch-team", json={"team_id": team_id})
        self.token = answer.get("token", self.token)
        return answer

    def me(self) -> JSON:
        return self._json("GET", "/auth/me")

    # ---- teams, members, quotas -----------------------------------------------------------------------------------
    def current_team(self) -> JSON:
        return self._json("GET", "/teams/current")

    def update_quotas(self, *, max_concurrent_jobs: int | None = None, max_generation_instances: int | None = None,
                      share: float | None = None, max_priority: str | None = None,
                      max_device_hours_per_month: float | None = None, team_id: int | None = None) -> JSON:
        """Change the given quotas (None: unchanged; `set_monthly_budget(None)` removes the monthly budget) of the
        current team, or of team `team_id` (platform admin)."""
        where = "current" if team_id is None else str(team_id)
        return self._json("PATCH", f"/teams/{where}/quotas", json=_drop_none(
            {"max_concurrent_jobs": max_concurrent_jobs, "max_generation_instances": max_generation_instances,
             "share": share, "max_priority": max_priority, "max_device_hours_per_month": max_device_hours_per_month}))

    def set_monthly_budget(self, device_hours: float | None) -> JSON:
        """The team's `max_device_hours_per_month` (admin); None removes the budget."""
        return self._json("PATCH", "/teams/current/quotas", json={"max_device_hours_per_month": device_hours})

    # ---- usage ----------------------------------------------------------------------------------------------------
    def usage(self, *, group_by: str = "team", start: str | None = None, end: str | None = None,
              job_id: int | None = None, key_id: int | None = None) -> JSON:
        """The team's usage (GET /usage): device-seconds by pool and tokens, grouped by team, job, key or day."""
        params = _drop_none({"group_by": group_by, "from": start, "to": end, "job_id": job_id, "key_id": key_id})
        return self._json("GET", "/usage", params=params)

    def usage_csv(self, *, group_by: str = "team", start: str | None = None, end: str | None = None,
                  job_id: int | None = None, key_id: int | None = None) -> str:
        params = _drop_none({"group_by": group_by, "from": start, "to": end, "job_id": job_id, "key_id": key_id,
                             "format": "csv"})
        return self._send("GET", "/usage", params=params).text

    def list_members(self) -> list[JSON]:
        return self._json("GET", "/teams/current/members")

    def invite(self, email: str, role: str = "member") -> JSON:
        """A pending invitation (admin): the account with this email joins only by accepting it."""
        return self._json("POST", "/teams/current/invitations", json={"email": email, "role": role})

    def add_member(self, email: str, role: str) -> JSON:
        """The older name of `invite` (nobody is added until they accept)."""
        return self.invite(email, role)

    def list_invitations(self) -> list[JSON]:
        """The current team's pending invitations."""
        return self._json("GET", "/teams/current/invitations")

    def revoke_invitation(self, invitation_id: int) -> None:
        self._json("DELETE", f"/teams/current/invitations/{invitation_id}")

    def my_invitations(self) -> list[JSON]:
        """Open invitations addressed to the caller's email."""
        return self._json("GET", "/auth/invitations")

    def accept_invitation(self, invitation_id: int) -> JSON:
        return self._json("POST", f"/auth/invitations/{invitation_id}/accept")

    def decline_invitation(self, invitation_id: int) -> JSON:
        return self._json("POST", f"/auth/invitations/{invitation_id}/decline")

    def update_member(self, user_id: int, role: str) -> JSON:
        return self._json("PATCH", f"/teams/current/members/{user_id}", json={"role": role})

    def remove_member(self, user_id: int) -> None:
        self._json("DELETE", f"/teams/current/members/{user_id}")

    # ---- API keys -------------------------------------------------------------------------------------------------
    def list_keys(self) -> JSON:
        return self._json("GET", "/keys")

    def create_key(self, name: str, scopes: list[str] | None = None) -> JSON:
        """The answer's `secret` is shown this once; the server keeps only its hash."""
        return self._json("POST", "/keys", json=_drop_none({"name": name, "scopes": scopes}))

    def revoke_key(self, key_id: int) -> None:
        self._json("DELETE", f"/keys/{key_id}")

    # ---- models and datasets --------------------------------------------------------------------------------------
    def list_models(self) -> JSON:
        return self._json("GET", "/models")

    def register_model(self, name: str, path: str | None = None, *, hub_id: str | None = None,
                       revision: str | None = None) -> JSON:
        """A server directory (`path`) or a Hub model (`hub_id` + `revision`, downloaded in the background)."""
        return self._json("POST", "/models", json=_drop_none({"name": name, "path": path, "hub_id": hub_id,
                                                              "revision": revision}))

    def upload_model(self, source: str | Path, name: str) -> JSON:
        """Upload a model: an archive (.tar.gz, .zip, ...) as is, or a local directory packed as .tar.gz first."""
        path = Path(source)
        if path.is_dir():
            import io
            import tarfile

            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
                for item in sorted(path.rglob("*")):
                    if item.is_file() and not item.is_symlink():
                        tar.add(item, arcname=str(item.relative_to(path)))
            return self._json("POST", "/models/upload", data={"name": name},
                              files={"file": (f"{path.name}.tar.gz", buffer.getvalue())}, timeout=600.0)
        with path.open("rb") as fh:
            return self._json("POST", "/models/upload", data={"name": name}, files={"file": (path.name, fh)},
                              timeout=600.0)

    def get_model(self, model_id: int) -> JSON:
        return self._json("GET", f"/models/{model_id}")

    def delete_model(self, model_id: int) -> None:
        """Delete one model version (409 while an unfinished job uses it)."""
        self._json("DELETE", f"/models/{model_id}")

    def set_hub_token(self, token: str | None) -> JSON:
        return self._json("PUT", "/models/hub-token", json={"token": token})

    def list_datasets(self) -> JSON:
        return self._json("GET", "/datasets")

    def upload_dataset(self, file: str | Path, name: str | None = None) -> JSON:
        """Upload a JSONL file (one object with a `prompt` per line); `name` defaults to the file's stem."""
        path = Path(file)
        with path.open("rb") as fh:
            return self._json("POST", "/datasets", data={"name": name or path.stem},
                              files={"file": (path.name, fh, "application/x-ndjson")}, timeout=300.0)

    def register_hub_dataset(self, name: str, hub_id: str, *, split: str, revision: str = "main") -> JSON:
        """One split of a Hub dataset, imported in the background (poll `get_dataset` until not `downloading`)."""
        return self._json("POST", "/datasets/hub", json={"name": name, "hub_id": hub_id, "split": split,
                                                         "revision": revision})

    def get_dataset(self, dataset_id: int) -> JSON:
        return self._json("GET", f"/datasets/{dataset_id}")

    def dataset_rows(self, dataset_id: int, *, limit: int | None = None, offset: int | None = None) -> JSON:
        return self._json("GET", f"/datasets/{dataset_id}/rows", params=_drop_none({"limit": limit, "offset": offset}))

    # ---- jobs -----------------------------------------------------------------------------------------------------
    def submit_job(self, spec: Mapping[str, Any] | BaseModel) -> JSON:
        body = spec.model_dump(mode="json", exclude_unset=True) if isinstance(spec, BaseModel) else dict(spec)
        return self._json("POST", "/jobs", json=body)

    def list_jobs(self, *, status: str | None = None, name: str | None = None, limit: int | None = None,
                  offset: int | None = None, tag: str | None = None, search: str | None = None) -> JSON:
        return self._json("GET", "/jobs", params=_drop_none(
            {"status": status, "name": name, "tag": tag, "q": search, "limit": limit, "offset": offset}))

    def annotate_job(self, job_id: int, *, tags: list[str] | None = None, add_tags: list[str] | None = None,
                     remove_tags: list[str] | None = None, notes: str | None = None) -> JSON:
        """Edit a job's tags (`tags` replaces them; `add_tags` / `remove_tags` change them) and/or notes."""
        body = _drop_none({"tags": tags, "add_tags": add_tags or None, "remove_tags": remove_tags or None,
                           "notes": notes})
        return self._json("PATCH", f"/jobs/{job_id}", json=body)

    def set_job_limits(self, job_id: int, *, max_device_seconds: float | None = None,
                       max_tokens: int | None = None) -> JSON:
        """Replace the job's `limits` (None: no such limit); a job paused by a limit resumes once it has room."""
        limits = {"max_device_seconds": max_device_seconds, "max_tokens": max_tokens}
        return self._json("PATCH", f"/jobs/{job_id}", json={"limits": limits})

    def get_job(self, job_id: int) -> JSON:
        return self._json("GET", f"/jobs/{job_id}")

    def cancel_job(self, job_id: int) -> JSON:
        return self._json("POST", f"/jobs/{job_id}/cancel")

    def pause_job(self, job_id: int) -> JSON:
        return self._json("POST", f"/jobs/{job_id}/pause")

    def resume_job(self, job_id: int) -> JSON:
        return self._json("POST", f"/jobs/{job_id}/resume")

    def fork_job(self, job_id: int, iteration: int, overrides: Mapping[str, Any] | None = None) -> JSON:
        """A new job from the job's checkpoint of `iteration` with `overrides` (dotted keys: `training.lr`)."""
        return self._json("POST", f"/jobs/{job_id}/fork", json={"iteration": iteration,
                                                                 "overrides": dict(overrides or {})})

    def scale_job(self, job_id: int, target_instances: int | None = None, *, autoscale: bool | None = None) -> JSON:
        body = _drop_none({"target_instances": target_instances, "autoscale": autoscale})
        if not body:
            raise ValueError("scale_job needs target_instances and/or autoscale")
        return self._json("POST", f"/jobs/{job_id}/scale", json=body)

    def wait_for_status(self, job_id: int, statuses: Iterable[str] = TERMINAL_STATUSES, *, timeout_s: float = 600.0,
                        poll_s: float = 1.0) -> JSON:
        """Poll until the job's status is one of `statuses`; returns the job. TimeoutError names the last status."""
        wanted = set(statuses)
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.get_job(job_id)
            if job["status"] in wanted:
                return job
            if time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} still {job['status']} after {timeout_s:.0f}s "
                                   f"(waiting for {', '.join(sorted(wanted))})")
            time.sleep(poll_s)

    def cluster(self) -> JSON:
        """Workers by pool and node, their holders and resource samples, queue depths, pending instances."""
        return self._json("GET", "/cluster")

    def queue(self) -> JSON:
        """The scheduler's queue: waiting items in order with their reasons, and the queue by team and priority."""
        return self._json("GET", "/queue")

    def tinker_sessions(self) -> Any:
        """The team's Tinker training clients (owner, base model, steps, last call, parked, checkpoints)."""
        return self._json("GET", "/tinker/sessions")

    def tinker_session(self, job_id: int) -> JSON:
        """One Tinker training client with every recorded step."""
        return self._json("GET", f"/tinker/sessions/{job_id}")

    def run_grader(self, grader: JSON, *, output_text: str, item: JSON | None = None, prompt: str = "") -> JSON:
        """Score one sample with a reward/grader spec (POST /graders/run): reward, sub_rewards, passed, error. A spec
        with `model` or `judge` graders runs on the generation pool (the server waits up to 120 s for it)."""
        body = {"grader": grader, "sample": {"output_text": output_text}, "item": item or {}, "prompt": prompt}
        return self._json("POST", "/graders/run", json=body, timeout=150.0)

    def job_health(self, job_id: int) -> JSON:
        """What the job is doing and the training-signal checks that fire (GET /jobs/{id}/health)."""
        return self._json("GET", f"/jobs/{job_id}/health")

    def job_events(self, job_id: int, *, after_id: int | None = None, limit: int | None = None) -> JSON:
        return self._json("GET", f"/jobs/{job_id}/events", params=_drop_none({"after_id": after_id, "limit": limit}))

    def job_iterations(self, job_id: int, *, after: int | None = None, limit: int | None = None) -> JSON:
        return self._json("GET", f"/jobs/{job_id}/iterations", params=_drop_none({"after": after, "limit": limit}))

    def chat_completion(self, model: str, messages: list[dict[str, Any]], **params: Any) -> JSON:
        """OpenAI's chat completion (POST /openai/v1/chat/completions; docs/openai.md): `params` are its fields
        (max_tokens, temperature, n, stop, seed, ...). Waits while an inference instance starts (up to 3 minutes)."""
        return self._json("POST", "/chat/completions", prefix="/openai/v1",
                          json={"model": model, "messages": messages, **_drop_none(params)}, timeout=180.0)

    def sample_prompts(self, job_ids: Sequence[int], *, search: str | None = None, limit: int | None = None) -> JSON:
        """Prompts these jobs (1-8) have stored samples of, those in most runs and iterations first."""
        return self._json("GET", "/samples/prompts", params=_drop_none(
            {"job_ids": ",".join(map(str, job_ids)), "q": search, "limit": limit}))

    def samples_by_prompt(self, job_ids: Sequence[int], prompt: str) -> JSON:
        """One prompt's samples in these jobs, grouped by job and iteration (checkpoints marked)."""
        return self._json("GET", "/samples/by-prompt", params={"job_ids": ",".join(map(str, job_ids)),
                                                              "prompt": prompt})

    def job_samples(self, job_id: int, *, iteration: int | None = None, limit: int | None = None,
                    **filters: float | None) -> JSON:
        """`filters`: min_reward, max_reward, min_length, max_length, policy_version, min_staleness, max_staleness,
        min_mismatch (the trajectory explorer's)."""
        return self._json("GET", f"/jobs/{job_id}/samples",
                          params=_drop_none({"iteration": iteration, "limit": limit, **filters}))

    def sample_tokens(self, job_id: int, sample_id: str) -> JSON:
        """A stored sample's per-token record: pieces, behaviour and trainer logprobs, versions, advantage, mask."""
        return self._json("GET", f"/jobs/{job_id}/samples/{quote(sample_id, safe='')}/tokens")

    def job_timeline(self, job_id: int, *, since: float | None = None) -> JSON:
        return self._json("GET", f"/jobs/{job_id}/timeline", params=_drop_none({"since": since}))

    def job_checkpoints(self, job_id: int) -> JSON:
        return self._json("GET", f"/jobs/{job_id}/checkpoints")

    def job_eta(self, job_id: int) -> JSON:
        """ETA and cost of a job (GET /jobs/{id}/eta): remaining iterations x recent iteration time, usage so far,
        its projection and the budgets it counts against."""
        return self._json("GET", f"/jobs/{job_id}/eta")

    # ---- evaluations ------------------------------------------------------------------------------------------------
    def create_evaluation(self, body: dict[str, Any]) -> JSON:
        return self._json("POST", "/evaluations", json=body)

    def get_evaluation(self, evaluation_id: int) -> JSON:
        return self._json("GET", f"/evaluations/{evaluation_id}")

    def list_evaluations(self, job_id: int | None = None) -> list[JSON]:
        return self._json("GET", "/evaluations", params={"job_id": job_id} if job_id else None)

    # ---- deployments ------------------------------------------------------------------------------------------------
    def create_deployment(self, body: dict[str, Any]) -> JSON:
        return self._json("POST", "/deployments", json=body)

    def list_deployments(self) -> list[JSON]:
        return self._json("GET", "/deployments")

    def get_deployment(self, deployment_id: int) -> JSON:
        return self._json("GET", f"/deployments/{deployment_id}")

    def update_deployment(self, deployment_id: int, changes: dict[str, Any]) -> JSON:
        return self._json("PATCH", f"/deployments/{deployment_id}", json=changes)

    def delete_deployment(self, deployment_id: int) -> None:
        self._json("DELETE", f"/deployments/{deployment_id}")

    def promote_checkpoint(self, body: dict[str, Any]) -> JSON:
        return self._json("POST", "/deployments/promote", json=body)

    def stream_job(self, job_id: int) -> Iterator[SSEEvent]:
        """Live events of a job (`metrics`, `event`, `status`, `timeline`, `samples`) until the server ends the
        stream. No read timeout: the generator blocks until the next event; close it to stop listening."""
        url = f"{API_PREFIX}/jobs/{job_id}/stream"
        headers = {**self._headers(), "Accept": "text/event-stream"}
        try:
            with self._http.stream("GET", url, headers=headers, timeout=httpx.Timeout(30.0, read=None)) as response:
                if response.status_code >= 400:
                    response.read()
                    _raise_for_status(response, "GET", url)
                yield from parse_sse(response.iter_lines())
        except httpx.TransportError as exc:
            raise ConnectionFailed(self.base_url, str(exc) or type(exc).__name__) from exc

    # ---- planner --------------------------------------------------------------------------------------------------
    def create_plan(self, request: Mapping[str, Any]) -> JSON:
        return self._json("POST", "/plans", json=dict(request))


def _raise_for_status(response: httpx.Response, method: str, url: str) -> None:
    if response.status_code < 400:
        return
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text.strip() or response.reason_phrase
    detail = body.get("detail", body) if isinstance(body, dict) else body
    raise APIError(response.status_code, detail, method=method, path=url, body=body)
