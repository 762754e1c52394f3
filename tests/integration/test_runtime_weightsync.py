"""Shared-store weight transport: atomic versioned safetensors + Redis announcement (p2p: test_weightsync_p2p.py)."""

from __future__ import annotations

from pathlib import Path

import redis
import torch

from workers.weightsync import SharedStoreTransport


def _state(scale: float) -> dict[str, torch.Tensor]:
    emb = torch.full((4, 3), scale)
    return {"embed.weight": emb, "lm_head.weight": emb, "norm.weight": torch.arange(3.0) * scale}  # tied tensors


def test_shared_store_publish_fetch_and_prune(tmp_path: Path, redis_client: redis.Redis, job_id: int) -> None:
    template = tmp_path / "base"
    template.mkdir()
    (template / "config.json").write_text("{}")
    store = SharedStoreTransport(tmp_path / "w", redis_client, job_id, template_dir=template, keep=2)
    assert store.latest_version() == 0
    for version in (1, 2, 3):
        seconds = store.publish(version, _state(float(version)))
        assert seconds > 0
    assert store.latest_version() == 3
    assert (store.path(3) / "config.json").exists()
    assert not store.path(1).exists()  # pruned; no temp directories left behind
    assert not list((tmp_path / "w").glob(".tmp-*"))
    got = store.fetch(3)
    assert torch.equal(got["norm.weight"], torch.arange(3.0) * 3)
    assert [t.kind for t in store.timings.entries] == ["publish"] * 3 + ["fetch"]

