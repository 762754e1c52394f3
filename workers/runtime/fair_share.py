"""Quota-weighted turns on a shared generation instance (docs/operator.md#shared-generation-instances).

Smooth weighted round-robin (nginx's upstream balancing): at each turn every candidate gains its weight in credit,
the one with the most credit is chosen and pays the sum of the candidates' weights. Over any stretch in which the
same members are candidates, a member of weight w gets w turns out of every sum-of-weights turns, and its turns are
spread out rather than taken in a burst (weights 3:1 give a a b a, not a a a b). A member that had nothing to offer
is passed over for the rest of the round (`pass_over`) and gains no credit meanwhile, so a job that is idle for a
while does not come back with a hoard of turns.
"""

from __future__ import annotations


class FairShare:
    def __init__(self) -> None:
        self.weights: dict[str, int] = {}
        self.credit: dict[str, int] = {}
        self.passed: set[str] = set()  # candidates no more this round

    def add(self, name: str, weight: int) -> None:
        if weight < 1:
            raise ValueError(f"share weight of {name!r} must be >= 1, got {weight}")
        self.weights[name] = weight
        self.credit[name] = 0

    def remove(self, name: str) -> None:
        self.weights.pop(name, None)
        self.credit.pop(name, None)
        self.passed.discard(name)

    def pass_over(self, name: str) -> None:
        """`name` cannot take a turn now (nothing to offer, or at its cap): skip it until `new_round`."""
        self.passed.add(name)

    def new_round(self) -> None:
        self.passed.clear()

    def next(self) -> str | None:
        """The member whose turn it is; None when every member was passed over this round."""
        candidates = [name for name in self.weights if name not in self.passed]
        if not candidates:
            return None
        for name in candidates:
            self.credit[name] += self.weights[name]
        chosen = max(candidates, key=lambda name: self.credit[name])
        self.credit[chosen] -= sum(self.weights[name] for name in candidates)
        return chosen
