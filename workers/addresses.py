"""The address a worker advertises for connections other hosts make to it (rank rendezvous, p2p weight sync).

Default: the local address of the interface that routes to the Redis server every host already reaches, so the other
hosts can reach it too (a hostname lookup often answers 127.0.1.1 on Debian-like hosts). An operator's environment
variable wins (NAT, several networks, Kubernetes pod IPs).
"""

from __future__ import annotations

import os
import socket

import redis


def route_ip(host: str) -> str:
    """The local address of the interface that routes to `host` (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((socket.gethostbyname(host), 9))
            return str(probe.getsockname()[0])
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def redis_host(client: redis.Redis) -> str:
    host = client.connection_pool.connection_kwargs.get("host")
    return str(host) if host else "127.0.0.1"  # a Unix socket (embedded Redis): everything is on this host


def advertised_host(client: redis.Redis, override_env: str) -> str:
    """`$override_env` when set, else the address of the interface that routes to Redis."""
    return os.environ.get(override_env) or route_ip(redis_host(client))
