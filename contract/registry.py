"""`Registry`: the one place an extension's name is spelled, on its implementation (verl's `@register_adv_est`).

    ALGORITHMS = Registry("algorithm")

    @ALGORITHMS.register("grpo", label="GRPO", train_flops_per_param=10)
    class GRPO(Algorithm): ...

    ALGORITHMS.get("grpo") -> GRPO;  ALGORITHMS.names() -> ("grpo", ...);  ALGORITHMS.info("grpo") -> its metadata

The four registries: algorithms (workers/training/algorithms/), engines (workers/generation/engines/), dispatch
policies (contract/skew.py) and built-in rewards (contract/rewards/builtins.py). A registry's package imports every
module in it (`import_all`), so a new extension is one new file. The torch-free side (the spec's choices, the planner's
cost table, the docs and the dashboard through the OpenAPI schema) reads the names and metadata from
contract/catalog.py, which `python scripts/export_catalog.py` writes from these registries; tests/test_catalog.py
fails when any place disagrees.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    target: T
    label: str  # what the dashboard shows
    summary: str  # one line for the docs (default: the first line of the target's docstring)
    meta: dict[str, Any] = field(default_factory=dict)  # torch-free facts other parts need (e.g. the cost model's)


class Registry(Generic[T]):
    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def register(self, name: str, *, label: str | None = None, summary: str | None = None,
                 **meta: Any) -> Callable[[T], T]:
        """Decorator: register the decorated class or function under `name` (once)."""

        def decorate(target: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            doc = (getattr(target, "__doc__", None) or "").strip().splitlines()
            self._entries[name] = Entry(name, target, label or name, summary or (doc[0] if doc else ""), dict(meta))
            return target

        return decorate

    def get(self, name: str) -> T:
        try:
            return self._entries[name].target
        except KeyError:
            raise ValueError(f"unknown {self.kind} {name!r}; choose one of {sorted(self._entries)}") from None

    def entry(self, name: str) -> Entry[T]:
        self.get(name)
        return self._entries[name]

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def entries(self) -> Iterable[Entry[T]]:
        return self._entries.values()

    def __contains__(self, name: object) -> bool:
        return name in self._entries


def import_all(package: str, path: Iterable[str], skip: Iterable[str] = ()) -> None:
    """Import every module of a package (so each registers its extensions); `skip`: modules that are not
    extensions (the package's base classes and helpers may be imported harmlessly too)."""
    skipped = set(skip)
    for info in pkgutil.iter_modules(list(path)):
        if info.name not in skipped:
            importlib.import_module(f"{package}.{info.name}")
