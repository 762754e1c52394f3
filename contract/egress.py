"""The egress policy: where the platform may connect on a tenant's behalf (alert webhooks, tracker servers, the Hub
endpoint from the control plane; remote agent services (`agent.url`), OpenEnv servers and verifiers env servers (ZMQ
`tcp://host:port`, `parse_tcp`; the worker connects to the address `Policy.connect_address` checked) from the
generation workers, which is why it
lives in `contract`; backend/services/egress.py re-exports it).

A URL passes when it parses strictly (http or https, a host, no user-info, no whitespace, control character or
backslash anywhere, no numeric host in a non-canonical form such as `2130706433` or `0177.0.0.1`) and every address
its host resolves to is public. Refused unless the operator's allow-list (`STREAMRL_EGRESS_ALLOW`: IPs, CIDRs or host
names) names them: loopback, unspecified, link-local (cloud metadata), private, shared (100.64/10), multicast,
reserved and other non-global ranges, the IPv4 forms embedded in IPv6 (mapped `::ffff:a.b.c.d`, NAT64, 6to4,
Teredo), and this host's own addresses.

Checked twice, because DNS answers change:

- at save, `check_url` (a name that does not resolve now is accepted: nothing can be reached through it yet);
- at send, `guarded_client`: every connection resolves its host, checks each address and connects to a checked one
  (the name still serves for TLS and Host), so a name that now points inward reaches nothing. Environment proxies
  are not used by these clients (the address checked must be the one connected to).
"""

from __future__ import annotations

import ipaddress
import re
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

from contract.settings import Settings

IP = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
ALLOW_HINT = "the operator can allow it with STREAMRL_EGRESS_ALLOW"
UNSAFE_CHARACTERS = re.compile(r"[\x00-\x20\x7f\\]")  # control characters, whitespace (CR, LF, tab, space), "\"
HOST_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")
NAT64 = ipaddress.ip_network("64:ff9b::/96")
OWN_ADDRESSES_TTL_S = 60.0


class EgressRefused(ValueError):
    """A URL or address the policy refuses; the message says why (fit for the tenant who gave the URL)."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str  # lower case, without brackets or a trailing dot
    port: int


@dataclass(frozen=True)
class Policy:
    networks: tuple[Network, ...] = ()
    hosts: frozenset[str] = frozenset()

    def allows_host(self, host: str) -> bool:
        return host in self.hosts

    def allows_address(self, ip: IP) -> bool:
        return any(ip.version == net.version and ip in net for net in self.networks)

    def refusal(self, ip: IP) -> str | None:
        """Why the policy refuses to connect to `ip` (None: it may)."""
        if self.allows_address(ip):
            return None
        for form in _forms(ip):
            if form != ip and self.allows_address(form):
                return None
            reason = _class_of(form)
            if reason is not None:
                return reason
        return None

    def connect_address(self, host: str, port: int) -> str:
        """The address to connect to for `host:port`: the first the policy permits (EgressRefused if none; OSError
        when the name does not resolve)."""
        addresses = resolve(host, port)
        if self.allows_host(host.lower().rstrip(".")):
            return str(addresses[0])
        reasons = []
        for ip in addresses:
            reason = self.refusal(ip)
            if reason is None:
                return str(ip)
            reasons.append(reason)
        raise EgressRefused(f"{host} is {reasons[0]}; {ALLOW_HINT}")

    def check_url(self, url: str, *, resolve_now: bool = True, tcp: bool = False) -> Target:
        """The URL's target if the policy lets it be saved; EgressRefused naming what is wrong otherwise. `tcp`: the
        URL is a ZMQ `tcp://host:port` address (`parse_tcp`), not an http(s) URL."""
        target = parse_tcp(url) if tcp else parse_url(url)
        if not resolve_now or self.allows_host(target.host):
            return target
        try:
            addresses = resolve(target.host, target.port)
        except OSError:
            return target  # unresolvable now: nothing to reach; checked again at each send
        for ip in addresses:
            reason = self.refusal(ip)
            if reason is not None:
                verb = "is" if _literal(target.host) is not None else "resolves to"
                raise EgressRefused(f"{target.host} {verb} {reason}; {ALLOW_HINT}")
        return target


@lru_cache(maxsize=32)
def _policy(text: str) -> Policy:
    networks, hosts = [], set()
    for entry in (e.strip().lower() for e in text.split(",") if e.strip()):
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            hosts.add(entry.rstrip("."))
    return Policy(tuple(networks), frozenset(hosts))


def policy_of(settings: Settings) -> Policy:
    return _policy(settings.egress_allow)


def parse_url(url: str) -> Target:
    """Strict parsing: EgressRefused for anything a lenient client might read differently than this check does."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise EgressRefused("must be an http:// or https:// URL")
    if UNSAFE_CHARACTERS.search(url):  # on the text as given: urlsplit drops CR, LF and tab
        raise EgressRefused("the URL contains whitespace, a control character (CR, LF, ...) or a backslash")
    if not url.isascii():
        raise EgressRefused("the URL must be ASCII: write an international host name in its xn-- form and "
                            "percent-encode the path")
    if "@" in parts.netloc:
        raise EgressRefused("user-info (user@ or user:password@ before the host) is not allowed in the URL")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise EgressRefused("the URL has no host")
    try:
        port = parts.port
    except ValueError:
        raise EgressRefused("the URL's port is not a number from 1 to 65535") from None
    if parts.netloc.startswith("["):
        if _literal(host) is None:
            raise EgressRefused(f"[{host}] is not an IPv6 address")
    elif _literal(host) is None and not _is_host_name(host):
        raise EgressRefused(f"{host!r} is not a host name or a dotted IPv4 address (numeric hosts must be written "
                            f"a.b.c.d)" if _numeric(host) else f"{host!r} is not a valid host name")
    return Target(parts.scheme, host, port or (443 if parts.scheme == "https" else 80))


def parse_tcp(url: str) -> Target:
    """A ZMQ `tcp://host:port` address (a verifiers env server), parsed as strictly as `parse_url`: a host name or
    an IP address and a port, nothing else (no path, query, user-info or wildcard)."""
    parts = urlsplit(url)
    if parts.scheme != "tcp":
        raise EgressRefused("must be a tcp://host:port address (verifiers' env server speaks ZMQ over TCP)")
    if parts.path or parts.query or parts.fragment or url.endswith(("?", "#")):
        raise EgressRefused("a tcp://host:port address has no path, query or fragment")
    target = parse_url("http://" + url[len("tcp://"):])
    if parts.port is None:
        raise EgressRefused("a tcp:// address needs its port (tcp://host:port)")
    return Target("tcp", target.host, target.port)


def _literal(host: str) -> IP | None:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    return ip if ip.version == 6 or str(ip) == host else None


def _numeric(host: str) -> bool:
    """What inet_aton (and so some resolvers) would read as an IPv4 address: 2130706433, 0x7f.1, 0177.0.0.1."""
    try:
        socket.inet_aton(host)
    except OSError:
        return False
    return True


def _is_host_name(host: str) -> bool:
    labels = host.split(".")
    return (len(host) <= 253 and not _numeric(host) and all(HOST_LABEL.match(label) for label in labels)
            and not labels[-1].isdigit())


def _forms(ip: IP) -> list[IP]:
    """The IPv4 addresses embedded in `ip` (an IPv6 path to an IPv4 host), then `ip` itself."""
    forms: list[IP] = []
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = [ip.ipv4_mapped, ip.sixtofour, *(ip.teredo or ())]
        if ip in NAT64:
            embedded.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        forms += [v4 for v4 in embedded if v4 is not None]
    return [*forms, ip]


def _class_of(ip: IP) -> str | None:
    if ip.is_unspecified:
        return "the unspecified address"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_private:
        return "a private-network address"
    if ip in own_addresses():
        return "an address of this platform's own host"
    if not ip.is_global:
        return "not a public address"
    return None


_own: tuple[float, frozenset[IP]] = (0.0, frozenset())


def own_addresses() -> frozenset[IP]:
    """This host's interface addresses (re-read every OWN_ADDRESSES_TTL_S)."""
    global _own
    read_at, addresses = _own
    if time.monotonic() - read_at < OWN_ADDRESSES_TTL_S:
        return addresses
    import psutil

    found: set[IP] = set()
    for entries in psutil.net_if_addrs().values():
        for entry in entries:
            if entry.family in (socket.AF_INET, socket.AF_INET6):
                try:
                    found.add(ipaddress.ip_address(entry.address.split("%", 1)[0]))
                except ValueError:
                    continue
    _own = (time.monotonic(), frozenset(found))
    return _own[1]


def resolve(host: str, port: int) -> list[IP]:
    """The host's addresses in resolver order (an IP literal is itself); OSError when the name does not resolve."""
    literal = _literal(host)
    if literal is not None:
        return [literal]
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: dict[IP, None] = {}
    for info in infos:
        seen.setdefault(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]), None)
    return list(seen)


class _GuardedBackend(httpcore.SyncBackend):
    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        try:
            address = self.policy.connect_address(host, port)
        except EgressRefused as exc:
            raise httpcore.ConnectError(f"refused by the egress policy: {exc}") from None
        except OSError as exc:
            raise httpcore.ConnectError(f"{host}: {exc}") from None
        return super().connect_tcp(address, port, timeout, local_address, socket_options)


class GuardedTransport(httpx.HTTPTransport):
    """An httpx transport whose every connection goes to an address the policy permits."""

    def __init__(self, policy: Policy) -> None:
        super().__init__(trust_env=False)
        pool = self._pool
        if not isinstance(pool, httpcore.ConnectionPool):  # a direct pool: no proxy is configured here
            raise TypeError(f"unexpected httpx pool {type(pool).__name__}")
        pool._network_backend = _GuardedBackend(policy)


def guarded_client(settings: Settings, **options: Any) -> httpx.Client:
    """An httpx client for tenant-given URLs: no redirects, no environment proxies, every connection checked."""
    options.setdefault("follow_redirects", False)
    return httpx.Client(transport=GuardedTransport(policy_of(settings)), trust_env=False, **options)


def check_url(url: str, settings: Settings, *, resolve_now: bool = True, tcp: bool = False) -> str:
    """`url` if the policy lets it be saved; EgressRefused otherwise (see module doc; `tcp`: a ZMQ tcp:// address)."""
    policy_of(settings).check_url(url, resolve_now=resolve_now, tcp=tcp)
    return url
