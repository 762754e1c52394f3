"""P2P weight transport with real processes: a trainer (this process) and two receiver processes, one joining late,
one killed mid-run; every received version equals the sent one bit for bit, and a dead or leaving peer never blocks
the trainer."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import torch
import torch.multiprocessing as mp

from workers.weightsync import P2PPublisher, P2PReceiver, SharedStoreTransport
from workers.weightsync.p2p import plan_buckets

BUCKET = 64 * 1024  # small buckets: a version spans several of them


def _state(version: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(version)
    return {
        "model.embed_tokens.weight": torch.randn(64, 96, generator=gen),  # 24 KiB
        "model.layers.0.mlp.up_proj.weight": torch.randn(96, 256, generator=gen),  # 96 KiB: a bucket of its own
        "model.layers.0.input_layernorm.weight": torch.randn(96, generator=gen).to(torch.bfloat16),
        "model.norm.weight": torch.randn(96, generator=gen),
        "lm_head.weight": torch.randn(64, 96, generator=gen),
        "step": torch.tensor([version], dtype=torch.int64),
    }


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def _same_bits(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return sorted(a) == sorted(b) and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and torch.equal(_bits(a[k]), _bits(b[k])) for k in a
    )


def _receiver(redis_url: str, job_id: int, iid: str, reports: Any, commands: Any) -> None:
    """Report (instance id, version, tensors) for every version received until told to leave."""
    torch.set_num_threads(1)
    client = redis.Redis.from_url(redis_url)
    rx = P2PReceiver(client, job_id, iid)
    seen = rx.latest_version()  # blocks for the trainer's catch-up
    reports.put((iid, seen, rx.fetch(seen)))
    while True:
        try:
            if commands.get(timeout=0.05) == "leave":
                break
        except Exception:  # queue.Empty
            pass
        try:
            rx.wait_for(seen + 1, timeout_s=0.2)
        except TimeoutError:
            continue
        seen = rx.latest_version()
        reports.put((iid, seen, rx.fetch(seen)))
    rx.close()
    reports.put((iid, -1, {}))


def _expect(reports: Any, want: dict[str, int], timeout_s: float = 60) -> None:
    """Each instance in `want` reports that version with exactly the sent tensors."""
    pending = dict(want)
    deadline = time.time() + timeout_s
    while pending:
        iid, version, state = reports.get(timeout=max(0.1, deadline - time.time()))
        assert pending.get(iid) == version, (iid, version, pending)
        assert _same_bits(state, _state(version)), f"{iid} received different bits for version {version}"
        del pending[iid]


def receiver_processes() -> Any:
    """Receivers fork from one server that imported torch and the transports once (a spawned interpreter imports them
    again for every receiver: seconds each on a loaded host); the server holds no threads or sockets. The preload list
    is the process's one forkserver's: set where it is used, not at import (collection)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "redis", "workers.weightsync"])
    return ctx


def _wait_peers(publisher: P2PPublisher, peers: list[str], timeout_s: float = 60) -> None:
    deadline = time.time() + timeout_s
    while publisher.peer_ids() != peers:
        assert time.time() < deadline, f"peers {publisher.peer_ids()} != {peers}; dropped {publisher.dropped}"
        time.sleep(0.05)


@pytest.mark.integration
def test_p2p_late_join_dead_peer_and_leave(
    redis_url: str, redis_client: redis.Redis, job_id: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STREAMRL_P2P_TIMEOUT_S", "5")
    assert len(plan_buckets(_state(0), BUCKET)) >= 3  # several buckets, two dtypes + int64
    ctx = receiver_processes()
    reports, commands = ctx.Queue(), {name: ctx.Queue() for name in ("gen-a", "gen-b")}
    publisher = P2PPublisher(redis_client, job_id, bucket_bytes=BUCKET, host="127.0.0.1")
    procs: dict[str, Any] = {}
    try:
        publisher.publish(0, _state(0))  # the driver primes the trainer's end at start
        procs["gen-a"] = ctx.Process(target=_receiver, args=(redis_url, job_id, "gen-a", reports, commands["gen-a"]))
        procs["gen-a"].start()
        _expect(reports, {"gen-a": 0})  # catch-up on join
        _wait_peers(publisher, ["gen-a"])
        for version in (1, 2):
            publisher.publish(version, _state(version))
            _expect(reports, {"gen-a": version})

        procs["gen-b"] = ctx.Process(target=_receiver, args=(redis_url, job_id, "gen-b", reports, commands["gen-b"]))
        procs["gen-b"].start()  # joins late: its first version is the trainer's current one
        _expect(reports, {"gen-b": 2})
        _wait_peers(publisher, ["gen-a", "gen-b"])
        publisher.publish(3, _state(3))
        _expect(reports, {"gen-a": 3, "gen-b": 3})

        os.kill(procs["gen-a"].pid, signal.SIGKILL)  # dies mid-run: the next publish must not wait for it
        procs["gen-a"].join(timeout=10)
        start = time.perf_counter()
        publisher.publish(4, _state(4))
        assert time.perf_counter() - start < 5 + 2
        _expect(reports, {"gen-b": 4})
        assert publisher.peer_ids() == ["gen-b"] and [iid for iid, _ in publisher.dropped] == ["gen-a"]
        publisher.publish(5, _state(5))
        _expect(reports, {"gen-b": 5})

        commands["gen-b"].put("leave")  # leaves cleanly: dropped at the next publish without a send
        assert reports.get(timeout=30)[:2] == ("gen-b", -1)
        procs["gen-b"].join(timeout=30)
        assert procs["gen-b"].exitcode == 0
        start = time.perf_counter()
        publisher.publish(6, _state(6))
        assert time.perf_counter() - start < 2
        assert publisher.peer_ids() == [] and publisher.dropped[-1] == ("gen-b", "stopped")
        assert int(redis_client.get(f"streamrl:job:{job_id}:weights:latest") or 0) == 6  # type: ignore[arg-type]
    finally:
        publisher.close()
        for proc in procs.values():
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=10)


def _follower(redis_url: str, job_id: int, root: str, reports: Any, done: Any) -> None:
    torch.set_num_threads(1)
    client = redis.Redis.from_url(redis_url)
    fallback = SharedStoreTransport(root, client=None, job_id=job_id, follow_disk=True)
    rx = P2PReceiver(client, job_id, "gen-far", fallback=fallback)
    rx.wait_for(1, timeout_s=60)  # the trainer's catch-up write of version 1
    reports.put(("gen-far", rx.following_store, rx.fetch(rx.latest_version())))
    rx.wait_for(2, timeout_s=60)
    reports.put(("gen-far", rx.following_store, rx.fetch(2)))
    done.wait(60)  # the tensors travel through shared memory: stay until the trainer has read them
    rx.close()


@pytest.mark.integration
def test_auto_instance_that_cannot_reach_the_trainer_follows_the_shared_store(
    redis_url: str, redis_client: redis.Redis, job_id: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`auto`: the trainer advertises an address the instance cannot reach (TEST-NET-2); the instance falls back to
    the shared store, and the trainer then writes its current version and every later one there."""
    monkeypatch.setenv("STREAMRL_P2P_JOIN_TIMEOUT_S", "3")
    store = SharedStoreTransport(tmp_path, client=None, job_id=job_id)
    publisher = P2PPublisher(redis_client, job_id, store=store, host="198.51.100.1", bucket_bytes=BUCKET)
    ctx = receiver_processes()
    reports, done = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=_follower, args=(redis_url, job_id, str(tmp_path), reports, done))
    try:
        publisher.publish(1, _state(1))
        assert not list(tmp_path.glob("v*"))  # nobody follows the store yet: p2p only
        proc.start()
        iid, following, state = reports.get(timeout=90)
        assert following and _same_bits(state, _state(1))
        publisher.publish(2, _state(2))
        iid, following, state = reports.get(timeout=60)
        assert following and _same_bits(state, _state(2))
        done.set()
        proc.join(timeout=30)
        assert proc.exitcode == 0 and publisher.peer_ids() == []
    finally:
        publisher.close()
        if proc.is_alive():
            proc.kill()


def _watcher(redis_url: str, job_id: int, iid: str, reports: Any, commands: Any) -> None:
    """Report (instance id, version, tensors) whenever the received version changes, up or down."""
    torch.set_num_threads(1)
    rx = P2PReceiver(redis.Redis.from_url(redis_url), job_id, iid)
    seen = None
    while True:
        try:
            if commands.get(timeout=0.05) == "leave":
                break
        except Exception:  # queue.Empty
            pass
        latest = rx.latest_version()
        if latest != seen:
            seen = latest
            reports.put((iid, latest, rx.fetch(latest)))
    rx.close()
    reports.put((iid, -1, {}))


@pytest.mark.integration
def test_instance_rejoins_a_restarted_trainer(redis_url: str, redis_client: redis.Redis, job_id: int) -> None:
    """The driver dies and a new one (next epoch) resumes from an older checkpoint: the instance joins the new trainer
    and gets its version, even though it is older (the runtime's rollback semantics), then the next ones."""
    ctx = receiver_processes()
    reports, commands = ctx.Queue(), ctx.Queue()
    first = P2PPublisher(redis_client, job_id, epoch=0, bucket_bytes=BUCKET, host="127.0.0.1")
    proc = ctx.Process(target=_watcher, args=(redis_url, job_id, "gen-a", reports, commands))
    second = None
    try:
        first.publish(3, _state(3))
        proc.start()
        _expect(reports, {"gen-a": 3})
        _wait_peers(first, ["gen-a"])
        first.close()  # the old driver is gone: its groups and stores with it
        second = P2PPublisher(redis_client, job_id, epoch=1, bucket_bytes=BUCKET, host="127.0.0.1")
        second.publish(2, _state(2))  # resumed from checkpoint 2
        _expect(reports, {"gen-a": 2})  # the catch-up of the new trainer
        _wait_peers(second, ["gen-a"])
        second.publish(3, _state(3))
        _expect(reports, {"gen-a": 3})
        commands.put("leave")
        assert reports.get(timeout=30)[:2] == ("gen-a", -1)
        proc.join(timeout=30)
        assert proc.exitcode == 0
    finally:
        first.close()
        if second is not None:
            second.close()
        if proc.is_alive():
            proc.kill()


@pytest.mark.integration
def test_an_instance_whose_group_cannot_carry_data_fails_with_the_reason(
    redis_client: redis.Redis, job_id: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Joined, then every first transfer fails (as NCCL did with both ends on one GPU): after JOIN_ATTEMPTS joins the
    instance reports the transport's error instead of rejoining forever."""
    from workers.weightsync.p2p import receiver as receiver_module

    real_make_group = receiver_module.make_group

    class Broken:
        def __init__(self, group: Any) -> None:
            self.group = group  # kept alive: the trainer's end stays connected

        def recv(self, *args: Any) -> Any:
            raise RuntimeError("injected: this group cannot carry data")

    monkeypatch.setenv("STREAMRL_P2P_TIMEOUT_S", "5")
    monkeypatch.setattr(receiver_module, "make_group", lambda *args: Broken(real_make_group(*args)))
    publisher = P2PPublisher(redis_client, job_id, bucket_bytes=BUCKET, host="127.0.0.1")
    rx = P2PReceiver(redis_client, job_id, "gen-broken")
    try:
        publisher.publish(0, _state(0))
        with pytest.raises(RuntimeError, match="first transfer failed 3 times: injected: this group cannot carry"):
            rx.latest_version()
        assert rx.joins == receiver_module.JOIN_ATTEMPTS
    finally:
        rx.close()
        publisher.close()
