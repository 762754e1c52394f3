"""Submit checks of `agent.url` (a remote agent service, workers/runtime/remote_agent.py): the URL must pass the
egress policy (contract/egress.py: http(s), a proper host, no private, loopback or link-local address unless the
operator allows it with STREAMRL_EGRESS_ALLOW), else a 422 naming `agent.url`. It is checked again at each POST."""

from __future__ import annotations

from backend.services.egress import EgressRefused, check_url
from backend.services.errors import InvalidInput
from contract.settings import get_settings
from contract.spec import JobSpec


def check_agent_url(spec: JobSpec) -> None:
    if spec.agent is None or spec.agent.url is None:
        return
    try:
        check_url(spec.agent.url, get_settings())
    except EgressRefused as exc:
        raise InvalidInput(f"agent.url: {exc}", loc=("body", "agent", "url")) from None
