"""The egress policy (contract/egress.py, shared with the workers that call remote agents), under its control-plane
name."""

from contract.egress import (
    ALLOW_HINT,
    EgressRefused,
    GuardedTransport,
    Policy,
    Target,
    check_url,
    guarded_client,
    own_addresses,
    parse_url,
    policy_of,
    resolve,
)

__all__ = ["ALLOW_HINT", "EgressRefused", "GuardedTransport", "Policy", "Target", "check_url", "guarded_client",
           "own_addresses", "parse_url", "policy_of", "resolve"]
