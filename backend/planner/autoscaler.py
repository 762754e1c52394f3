"""Autoscaler policy for generation instances (docs/architecture.md#elastic-scaling).

Pure: the controller feeds it numbers and acts on it.

Per iteration, delta = T_gen - T_train. Generation time is throughput-bound, so with I instances one more would
save T_gen / (I + 1) and one fewer would cost T_gen / (I - 1) (the measured per-instance rate).
- Scale up when delta exceeds the saving of one more instance (plus `threshold_s`): after the step generation is
  still no faster than training, so every added instance shortens the iteration.
- Scale down when -delta (training the bottleneck) exceeds what removing one would cost: the iteration time does not
  change and an instance is freed.
The step is as many instances as keep that property (at most `max_step`). A change needs `hysteresis` consecutive
iterations measured at the current count that agree, and none within `cooldown_s` of the last change. The target
always lies within [min_instances, min(max_instances, quota)]; a current count outside is pulled back at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

Action = Literal["up", "down", "hold"]


@dataclass(frozen=True)
class IterationRecord:
    gen_seconds: float
    train_seconds: float
    instances: int  # generation instances that produced this iteration


@dataclass(frozen=True)
class ScalingBounds:
    min_instances: int = 1
    max_instances: int = 4
    quota: int | None = None  # instances the team's quota still allows this job (including its current ones)

    @property
    def upper(self) -> int:
        """min(max_instances, quota), but never below min_instances: the autoscaler never starves a running job
        (admission control, not the autoscaler, keeps a team within its quota)."""
        upper = self.max_instances if self.quota is None else min(self.max_instances, self.quota)
        return max(upper, self.min_instances)


@dataclass(frozen=True)
class ScaleDecision:
    target: int
    reason: str
    numbers: dict[str, float] = field(default_factory=dict)
    action: Action = "hold"


def _bounded(current: int, bounds: ScalingBounds) -> ScaleDecision | None:
    if current > bounds.upper:
        limit = "team quota" if bounds.quota is not None and bounds.quota < bounds.max_instances else "max_instances"
        return ScaleDecision(bounds.upper, f"{current} instances exceed {limit} ({bounds.upper})",
                             {"instances": current, "upper": bounds.upper}, "down")
    if current < bounds.min_instances:
        return ScaleDecision(bounds.min_instances, f"{current} instances below min_instances "
                             f"({bounds.min_instances})", {"instances": current}, "up")
    return None


def decide(
    history: Sequence[IterationRecord],
    *,
    current: int,
    bounds: ScalingBounds,
    now: float,
    last_change_at: float | None = None,
    cooldown_s: float = 30.0,
    hysteresis: int = 3,
    threshold_s: float = 0.0,
    max_step: int = 4,
) -> ScaleDecision:
    """What the instance count should be after the latest iteration in `history` (oldest first)."""
    if hysteresis < 1 or max_step < 1:
        raise ValueError("hysteresis and max_step must be >= 1")
    forced = _bounded(current, bounds)
    if forced is not None:
        return forced
    if last_change_at is not None and now - last_change_at < cooldown_s:
        left = cooldown_s - (now - last_change_at)
        return ScaleDecision(current, f"cooldown: {left:.1f}s left", {"cooldown_left_s": left})
    window = [r for r in history[-hysteresis:] if r.instances == current]
    if len(window) < hysteresis:
        return ScaleDecision(current, f"waiting for {hysteresis} iterations at {current} instances "
                             f"(have {len(window)})", {"iterations_seen": len(window)})
    gen = sum(r.gen_seconds for r in window) / len(window)
    train = sum(r.train_seconds for r in window) / len(window)
    save_up = gen / (current + 1)
    cost_down = gen / (current - 1) if current > 1 else math.inf
    numbers = {"gen_seconds": gen, "train_seconds": train, "delta": gen - train, "save_up": save_up,
               "cost_down": cost_down if math.isfinite(cost_down) else -1.0, "instances": current}
    all_up = all(r.gen_seconds - r.train_seconds > r.gen_seconds / (current + 1) + threshold_s for r in window)
    all_down = current > 1 and all(
        r.train_seconds - r.gen_seconds > r.gen_seconds / (current - 1) + threshold_s for r in window)
    if all_up:
        if current >= bounds.upper:
            return ScaleDecision(current, f"generation-bound but at the upper bound ({bounds.upper})", numbers)
        steps = max(1, math.floor(current * gen / max(train, 1e-9)) - current)  # keeps T_gen(I + k) >= T_train
        target = min(bounds.upper, current + min(steps, max_step))
        return ScaleDecision(target, f"generation-bound: delta {gen - train:.2f}s > {save_up:.2f}s saved per added "
                             f"instance", numbers, "up")
    if all_down:
        if current <= bounds.min_instances:
            return ScaleDecision(current, f"training-bound but at min_instances ({bounds.min_instances})", numbers)
        steps = max(1, current - math.ceil(current * gen / max(train, 1e-9)))  # keeps T_gen(I - k) <= T_train
        target = max(bounds.min_instances, current - min(steps, max_step))
        return ScaleDecision(target, f"training-bound: {train - gen:.2f}s > {cost_down:.2f}s one fewer instance "
                             f"would add", numbers, "down")
    return ScaleDecision(current, "balanced", numbers)
