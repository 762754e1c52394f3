"""The egress policy on its own (backend/services/egress.py): strict parsing, every non-public address class and its
IPv6 disguises refused, the operator's allow-list by address, network or name, this host's own addresses, and the
setting's validation. The routes that use it are tested in tests/alerts/test_alert_egress.py and
tests/trackers/test_tracker_egress.py."""

from __future__ import annotations

import ipaddress

import psutil
import pytest
from pydantic import ValidationError

from backend.services.egress import EgressRefused, Policy, own_addresses, parse_url, policy_of
from contract.settings import Settings


def _settings(allow: str = "") -> Settings:
    return Settings(secret_key="x" * 32, egress_allow=allow)


@pytest.mark.parametrize(("url", "why"), [
    ("ftp://example.com/x", "http:// or https://"),
    ("example.com/x", "http:// or https://"),
    ("http://example.com/a\r\nHost: evil", "control character"),
    ("http://example.com/a\tb", "control character"),
    ("http://exa mple.com/", "whitespace"),
    ("http://example.com\\@127.0.0.1/", "backslash"),
    ("http://u:p@example.com/", "user-info"),
    ("http://example.com@127.0.0.1/", "user-info"),
    ("http://2130706433/", "dotted"),
    ("http://0x7f000001/", "dotted"),
    ("http://0177.0.0.1/", "dotted"),
    ("http://127.1/", "dotted"),
    ("http://exämple.com/", "ASCII"),
    ("http://example.com:99999/", "port"),
    ("http:///path", "no host"),
    ("http://-bad-.com/", "valid host name"),
])
def test_strict_parsing_names_what_is_wrong(url: str, why: str) -> None:
    with pytest.raises(EgressRefused, match=why):
        parse_url(url)


@pytest.mark.parametrize(("host", "why"), [
    ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("[::1]", "loopback"), ("0.0.0.0", "unspecified"),
    ("[::]", "unspecified"), ("169.254.169.254", "link-local"), ("[fe80::1]", "link-local"),
    ("10.0.0.1", "private"), ("172.16.5.4", "private"), ("192.168.1.1", "private"), ("[fd00::1]", "private"),
    ("100.64.0.1", "not a public"), ("224.0.0.251", "multicast"), ("[ff02::1]", "multicast"),
    ("192.0.2.1", "private"), ("[::ffff:127.0.0.1]", "loopback"), ("[::ffff:10.0.0.1]", "private"),
    ("[64:ff9b::a00:1]", "private"), ("[2002:7f00:1::]", "loopback"), ("localhost", "loopback"),
])
def test_every_internal_address_class_is_refused(host: str, why: str) -> None:
    with pytest.raises(EgressRefused, match=why) as refused:
        policy_of(_settings()).check_url(f"http://{host}:8080/x")
    assert "STREAMRL_EGRESS_ALLOW" in str(refused.value)


def test_public_addresses_and_unresolvable_names_pass_at_save() -> None:
    policy = policy_of(_settings())
    for url in ("https://8.8.8.8/x", "http://[2001:4860:4860::8888]/x", "https://[::ffff:8.8.8.8]/",
                "https://hooks.example.invalid/x"):  # the last resolves nowhere: nothing to reach now
        policy.check_url(url)


def test_the_allow_list_names_addresses_networks_or_hosts() -> None:
    policy = policy_of(_settings("127.0.0.1, 10.1.0.0/16 ,LocalHost"))
    assert policy == Policy((ipaddress.ip_network("127.0.0.1/32"), ipaddress.ip_network("10.1.0.0/16")),
                            frozenset({"localhost"}))
    for url in ("http://127.0.0.1:5000/", "http://10.1.200.3/", "http://localhost:9/", "http://[::ffff:10.1.0.9]/"):
        policy.check_url(url)
    with pytest.raises(EgressRefused, match="private"):
        policy.check_url("http://10.2.0.1/")
    assert policy.connect_address("localhost", 80) in {"127.0.0.1", "::1"}
    with pytest.raises(EgressRefused):
        policy_of(_settings()).connect_address("localhost", 80)


def test_this_hosts_own_addresses_are_known() -> None:
    found = {ipaddress.ip_address(entry.address.split("%")[0]) for entries in psutil.net_if_addrs().values()
             for entry in entries if entry.family.name in ("AF_INET", "AF_INET6")}
    assert found and found <= own_addresses()
    policy = policy_of(_settings())
    assert all(policy.refusal(ip) is not None for ip in found)  # loopback, private, or "this platform's own host"


@pytest.mark.parametrize("entry", ["http://x", "a b", "10.0.0.0/33", "-x-"])
def test_a_bad_allow_list_entry_is_a_configuration_error(entry: str) -> None:
    with pytest.raises(ValidationError, match="egress_allow"):
        _settings(entry)
