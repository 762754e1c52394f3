"""Printing a job's event log, and following it live over the SSE stream (`streamrl jobs logs ID --follow`).

Following survives a dropped stream: it reconnects, first catching up through `GET /jobs/{id}/events` after the last
event id it printed, so no event is lost or printed twice. It ends when the job reaches a final status; the exit
status is 0 if the job succeeded, 1 otherwise.
"""

from __future__ import annotations

import time
from typing import Any

import typer

from backend.client import ConnectionFailed, StreamRLClient

TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
METRIC_KEYS = ("reward_mean", "samples_per_s", "iteration_seconds", "gen_seconds", "train_seconds", "instances")
PAGE = 500


def format_event(ev: dict[str, Any]) -> str:
    stamp = str(ev.get("created_at") or "")[:19]
    return f"{stamp}  [{ev.get('kind', 'event')}] {ev.get('message', '')}".strip()


def format_metrics(data: Any) -> str:
    metrics = data.get("metrics", data) if isinstance(data, dict) else {}
    iteration = data.get("iteration", "?") if isinstance(data, dict) else "?"
    parts = [f"{k}={metrics[k]:.4g}" if isinstance(metrics[k], float) else f"{k}={metrics[k]}"
             for k in METRIC_KEYS if k in metrics]
    return f"iteration {iteration}: " + " ".join(parts)


def print_all_events(api: StreamRLClient, job_id: int, after_id: int | None) -> int | None:
    """Print every event after `after_id`; returns the last id printed (or `after_id`)."""
    while True:
        page = api.job_events(job_id, after_id=after_id, limit=PAGE).get("data", [])
        for ev in page:
            typer.echo(format_event(ev))
            after_id = ev.get("id", after_id)
        if len(page) < PAGE:
            return after_id


def _status_of(data: Any) -> str | None:
    return data.get("status") if isinstance(data, dict) else (str(data) if data else None)


def _finish(api: StreamRLClient, job_id: int, last_id: int | None) -> None:
    """Print the events not yet shown (the final status is published before its events), then the outcome."""
    print_all_events(api, job_id, last_id)
    job = api.get_job(job_id)
    error = f": {job['error']}" if job.get("error") else ""
    typer.echo(f"job {job_id} {job['status']}{error}")
    raise typer.Exit(0 if job["status"] == "succeeded" else 1)


def _stream_once(api: StreamRLClient, job_id: int, last_id: int | None, show_metrics: bool) -> tuple[int | None, bool]:
    """Print live events until the stream ends; returns (last event id, whether a final status was seen)."""
    for sse in api.stream_job(job_id):
        data = sse.data
        if sse.event == "event" and isinstance(data, dict):
            event_id = data.get("id")
            if event_id is not None and last_id is not None and event_id <= last_id:
                continue  # already printed while catching up
            typer.echo(format_event(data))
            last_id = event_id if event_id is not None else last_id
        elif sse.event == "status":
            status = _status_of(data)
            typer.echo(f"status: {status}")
            if status in TERMINAL:
                return last_id, True
        elif sse.event == "metrics" and show_metrics:
            typer.echo(format_metrics(data))
    return last_id, False


def follow_job(api: StreamRLClient, job_id: int, *, show_metrics: bool = True, max_reconnects: int = 30) -> None:
    last_id = print_all_events(api, job_id, None)
    if api.get_job(job_id)["status"] in TERMINAL:
        _finish(api, job_id, last_id)
    failures = 0
    try:
        while True:
            try:
                last_id, ended = _stream_once(api, job_id, last_id, show_metrics)
                failures = 0
            except ConnectionFailed:
                failures += 1
                if failures > max_reconnects:
                    raise
                ended = False
            if ended:
                _finish(api, job_id, last_id)
            time.sleep(min(1.0 * max(failures, 1), 5.0))
            last_id = print_all_events(api, job_id, last_id)
            if api.get_job(job_id)["status"] in TERMINAL:
                _finish(api, job_id, last_id)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
