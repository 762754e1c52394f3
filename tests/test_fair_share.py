"""Quota-weighted turns on a shared generation instance (workers/runtime/fair_share.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from workers.runtime.fair_share import FairShare


def turns(share: FairShare, count: int) -> list[str]:
    picked = []
    for _ in range(count):
        name = share.next()
        assert name is not None
        picked.append(name)
    return picked


def test_turns_follow_the_weights_and_are_spread_out() -> None:
    share = FairShare()
    share.add("big", 3)
    share.add("small", 1)
    picked = turns(share, 40)
    assert Counter(picked) == {"big": 30, "small": 10}
    assert picked[:4].count("small") == 1  # one in every four turns, not a burst of three first
    assert all("small" in picked[i:i + 4] for i in range(0, 40, 4))


def test_equal_weights_alternate() -> None:
    share = FairShare()
    for name in ("a", "b", "c"):
        share.add(name, 2)
    assert Counter(turns(share, 30)) == {"a": 10, "b": 10, "c": 10}


def test_a_passed_over_member_waits_for_the_next_round_and_hoards_nothing() -> None:
    share = FairShare()
    share.add("busy", 1)
    share.add("idle", 1)
    share.pass_over("idle")  # nothing to offer this round: the other takes every turn
    assert turns(share, 10) == ["busy"] * 10
    share.pass_over("busy")
    assert share.next() is None  # everyone passed: the round is over
    share.new_round()
    assert Counter(turns(share, 10)) == {"busy": 5, "idle": 5}  # back to even, no catch-up burst


def test_members_come_and_go() -> None:
    share = FairShare()
    share.add("a", 1)
    assert turns(share, 3) == ["a"] * 3
    share.add("b", 2)
    assert Counter(turns(share, 30)) == {"a": 10, "b": 20}
    share.remove("a")
    assert turns(share, 3) == ["b"] * 3
    share.remove("b")
    assert share.next() is None


def test_a_weight_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="share weight of 'x' must be >= 1"):
        FairShare().add("x", 0)
