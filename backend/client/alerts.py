"""Client methods for notification rules (`/alerts/rules`); mixed into `StreamRLClient`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

JSON = dict[str, Any]


class AlertsClient:
    _json: Callable[..., Any]  # StreamRLClient's request method (the mixin adds paths, never transport)

    def list_alert_rules(self) -> JSON:
        return self._json("GET", "/alerts/rules")

    def create_alert_rule(self, rule: dict[str, Any]) -> JSON:
        return self._json("POST", "/alerts/rules", json=rule)

    def get_alert_rule(self, rule_id: int) -> JSON:
        return self._json("GET", f"/alerts/rules/{rule_id}")

    def update_alert_rule(self, rule_id: int, changes: dict[str, Any]) -> JSON:
        return self._json("PATCH", f"/alerts/rules/{rule_id}", json=changes)

    def delete_alert_rule(self, rule_id: int) -> None:
        self._json("DELETE", f"/alerts/rules/{rule_id}")

    def test_alert_rule(self, rule_id: int) -> JSON:
        return self._json("POST", f"/alerts/rules/{rule_id}/test")

    def alert_deliveries(self, rule_id: int, *, limit: int | None = None, offset: int | None = None) -> JSON:
        params = {k: v for k, v in {"limit": limit, "offset": offset}.items() if v is not None}
        return self._json("GET", f"/alerts/rules/{rule_id}/deliveries", params=params)
