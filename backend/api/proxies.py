"""Which peers may say who the client is: uvicorn's proxy-header options from `settings.trusted_proxies`.

uvicorn rewrites the client address from X-Forwarded-For for the peers it trusts, and by default trusts loopback:
any local process could then pick the address the login limits key on. Every launch of the API passes these options
(`streamrl up`, deploy/compose.yaml and deploy/k8s/api.yaml pass the same setting), so only configured proxies are
believed; with none configured the headers are ignored and the peer address is the client's.
"""

from __future__ import annotations

from typing import Any

from contract.settings import Settings


def uvicorn_proxy_options(settings: Settings) -> dict[str, Any]:
    """`uvicorn.Config(**options)`."""
    trusted = settings.trusted_proxies
    return {"proxy_headers": bool(trusted), "forwarded_allow_ips": trusted or ""}


def uvicorn_proxy_args(settings: Settings) -> list[str]:
    """The same as `uvicorn` command-line options."""
    trusted = settings.trusted_proxies
    return ["--proxy-headers", "--forwarded-allow-ips", trusted] if trusted else ["--no-proxy-headers"]
