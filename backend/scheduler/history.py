"""Each team's recent standing: its weighted dominant share averaged with exponential decay (Slurm's fair-share
usage with a half-life), kept by the controller between passes and read into `TeamQuota.recent`."""

from __future__ import annotations

import math
import os

DEFAULT_HALF_LIFE_S = 3600.0


def half_life_s() -> float:
    """STREAMRL_FAIR_SHARE_HALF_LIFE_S (default 3600): how fast a team's past use stops counting against it."""
    return float(os.environ.get("STREAMRL_FAIR_SHARE_HALF_LIFE_S", DEFAULT_HALF_LIFE_S))


def decayed(previous: float, current: float, elapsed_s: float, half_life: float) -> float:
    """The average after `elapsed_s` more seconds at `current` (a continuous-time exponential moving average)."""
    if elapsed_s <= 0:
        return previous
    keep = math.exp(-math.log(2) * elapsed_s / half_life)
    return previous * keep + current * (1 - keep)
