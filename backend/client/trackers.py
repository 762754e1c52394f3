"""Client methods for tracker connections (`/trackers`) and a job's tracker runs; mixed into `StreamRLClient`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

JSON = dict[str, Any]


class TrackersClient:
    _json: Callable[..., Any]  # StreamRLClient's request method (the mixin adds paths, never transport)

    def list_trackers(self) -> JSON:
        return self._json("GET", "/trackers")

    def set_tracker(self, kind: str, fields: dict[str, Any]) -> JSON:
        return self._json("PUT", f"/trackers/{kind}", json=fields)

    def delete_tracker(self, kind: str) -> None:
        self._json("DELETE", f"/trackers/{kind}")

    def job_trackers(self, job_id: int) -> JSON:
        return self._json("GET", f"/jobs/{job_id}/trackers")
