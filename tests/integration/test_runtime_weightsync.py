"""Weight transports: shared store (atomic versioned safetensors + Redis announcement) and gloo broadcast."""

from __future__ import annotations

import socket
from pathlib import Path

import redis
import torch
import torch.multiprocessing as mp

from workers.weightsync import BroadcastTransport, SharedStoreTransport


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _receiver(rank: int, world: int, url: str, queue: mp.Queue[float]) -> None:
    torch.set_num_threads(1)
    transport = BroadcastTransport(rank, world, url, like=_state(0.0))
    got = transport.fetch(7)
    queue.put(float(got["norm.weight"][2]))
    transport.close()


def test_gloo_broadcast_reaches_every_rank() -> None:
    url = f"tcp://127.0.0.1:{_free_port()}"
    ctx = mp.get_context("spawn")
    queue: mp.Queue[float] = ctx.Queue()
    proc = ctx.Process(target=_receiver, args=(1, 2, url, queue))
    proc.start()
    sender = BroadcastTransport(0, 2, url, like=_state(0.0))
    seconds = sender.publish(7, _state(5.0))
    assert queue.get(timeout=60) == 10.0
    proc.join(timeout=60)
    sender.close()
    assert proc.exitcode == 0 and seconds > 0 and sender.latest_version() == 7
