"""Errors of multi-rank training that the runtime handles (kept free of torch.distributed imports, so a single-rank
driver does not pay for loading FSDP and DCP)."""

from __future__ import annotations


class RanksLost(RuntimeError):
    """A trainer rank stopped answering (died, or its host went away): the job restarts its ranks from the last
    checkpoint, the way a dead driver does."""
