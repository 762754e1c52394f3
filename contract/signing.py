"""Signed requests the platform sends to tenants' services (alert webhooks, remote agents at `agent.url`): the
header carries "sha256=" + the hex HMAC-SHA256 of the raw body under a secret the receiver shares; receivers
recompute it over the body they got and compare with `hmac.compare_digest`."""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-StreamRL-Signature"


def sign(secret: str, body: bytes) -> str:
    """The signature header's value for `body`."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def agent_secret(secret_key: str, job_id: int) -> str:
    """A job's `agent.url` signing secret, derived from the platform's secret key (GET /jobs/{id}/rollouts/agent
    shows it to the team's members)."""
    return hmac.new(secret_key.encode(), f"agent-url:{job_id}".encode(), hashlib.sha256).hexdigest()
