"""A generation instance's end of p2p weight sync (rank 1 of its group); the protocol is in __init__.py."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import redis
import torch
import torch.distributed as dist

from contract import keys
from workers.addresses import route_ip
from workers.generation.engine import GenerationEngine
from workers.weightsync.base import SyncTiming, WeightTransport
from workers.weightsync.p2p.groups import (
    POLL_S,
    gpu_identity,
    join_timeout_s,
    make_group,
    text_of,
    timeout_s,
)
from workers.weightsync.p2p.layout import (
    Bucket,
    bucket_views,
    parse_layout,
)
from workers.weightsync.shared_store import SharedStoreTransport

log = logging.getLogger(__name__)
JOIN_ATTEMPTS = 3  # consecutive failed joins (other than an unreachable trainer) before the instance gives up
ANNOUNCE_POLL_S = 0.005  # an instance checks its group's TCPStore (on the trainer) for the next version


class _Joined:
    def __init__(self, store: Any, group: Any, buckets: list[Bucket], device: torch.device, trainer: Any):
        self.store, self.group, self.buckets, self.trainer = store, group, buckets, trainer
        self.received = 0  # versions received over this group
        self.incoming = [torch.empty(b.numel, dtype=b.torch_dtype, device=device) for b in buckets]


class P2PReceiver(WeightTransport):
    """A generation instance's end. `fallback` (auto): followed instead when the trainer cannot be reached."""

    def __init__(
        self,
        client: redis.Redis,
        job_id: int,
        instance_id: str,
        *,
        device: str = "cpu",
        fallback: SharedStoreTransport | None = None,
    ):
        super().__init__()
        self.client, self.job_id, self.instance_id = client, job_id, instance_id
        self.device = torch.device(device)
        self.fallback = fallback
        self.key = keys.weights_p2p(job_id)
        self.following_store = False
        self.joins = 0
        self._cond = threading.Condition()
        self._ready: list[torch.Tensor] | None = None
        self._ready_version: int | None = None
        self._synced: Any = None  # the `trainer` announcement whose version `_ready` holds
        self._buckets: list[Bucket] = []
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the receive thread --------------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"p2p-recv-{self.instance_id}", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                joined = self._join()
            except _Unreachable as err:
                if self.fallback is None:
                    self._fail(RuntimeError(f"weight_sync p2p: {err}"))
                    return
                log.warning("instance %s: %s; following the shared store", self.instance_id, err)
                self.client.hset(self.key, f"store:{self.instance_id}", time.time())
                with self._cond:
                    self.following_store = True
                    self._cond.notify_all()
                return
            except Exception as err:
                if self._stop.is_set():
                    return
                failures += 1
                if failures >= JOIN_ATTEMPTS:
                    self._fail(RuntimeError(f"weight_sync p2p: joining the trainer failed {failures} times: {err}"))
                    return
                log.warning("instance %s: joining p2p weight sync failed (%s); trying again", self.instance_id, err)
                time.sleep(1.0)
                continue
            try:
                self._receive(joined)
            except Exception as err:  # the trainer went away (driver restart) or dropped us: join again
                if self._stop.is_set():
                    return
                if joined.received or isinstance(err, ConnectionResetError):  # synced before, or a new trainer
                    failures = 0
                else:  # joined, then the first transfer failed (a group that cannot carry data): a failed join
                    failures += 1
                    if failures >= JOIN_ATTEMPTS:
                        self._fail(RuntimeError(
                            f"weight_sync p2p: the trainer's first transfer failed {failures} times: {err}"))
                        return
                log.warning("instance %s: p2p weight sync lost the trainer (%s); joining again", self.instance_id, err)
                time.sleep(0.5)
            finally:
                joined.group = None
                joined.store = None

    def _fail(self, err: BaseException) -> None:
        with self._cond:
            self._error = err
            self._cond.notify_all()

    def _join(self) -> _Joined:
        """Ask the trainer for a group and connect to it. Waits as long as it takes for a trainer (the driver may be
        starting or restarting); the request is posted again whenever a new driver announces itself."""
        announced: Any = None
        nonce = ""
        while True:
            trainer = self.client.hget(self.key, "trainer")
            if trainer is not None and trainer != announced:
                announced, nonce = trainer, uuid.uuid4().hex
                self.client.hset(
                    self.key,
                    f"join:{self.instance_id}",
                    json.dumps({"nonce": nonce, "cuda": self.device.type == "cuda", "gpu": gpu_identity(self.device)}),
                )
            raw = self.client.hget(self.key, f"accept:{self.instance_id}") if nonce else None
            reply = json.loads(text_of(raw)) if raw is not None else None
            if reply is not None and reply.get("nonce") == nonce:
                break
            if self._stop.wait(POLL_S):
                raise InterruptedError("closing")
        timeout = timedelta(seconds=join_timeout_s())
        try:
            store = dist.TCPStore(
                reply["host"],
                reply["port"],
                2,
                is_master=False,
                timeout=timedelta(seconds=min(10.0, join_timeout_s())),
            )
        except Exception as err:
            raise _Unreachable(f"cannot reach the trainer at {reply['host']}:{reply['port']} ({err})") from err
        store.set_timeout(timeout)
        buckets = parse_layout(text_of(store.get("layout")))
        group = make_group(reply["backend"], store, 1, route_ip(reply["host"]), timeout)
        self.client.hset(self.key, f"peer:{self.instance_id}", time.time())
        self.joins += 1
        self._buckets = buckets
        device = self.device if reply["backend"] == "nccl" else torch.device("cpu")  # gloo sends CPU tensors
        return _Joined(store, group, buckets, device, announced)

    def _receive(self, joined: _Joined) -> None:
        seq, timeout = 0, timedelta(seconds=timeout_s())
        checked = time.monotonic()
        while not self._stop.is_set():
            key = f"v/{seq}"
            if not joined.store.check([key]):
                if time.monotonic() - checked > POLL_S * 5:  # a newer driver replaced ours (it may still be alive)
                    checked = time.monotonic()
                    if self.client.hget(self.key, "trainer") != joined.trainer:
                        raise ConnectionResetError("a new trainer announced itself")
                time.sleep(ANNOUNCE_POLL_S)
                continue
            version = int(json.loads(text_of(joined.store.get(key)))["version"])
            for index, buf in enumerate(joined.incoming):
                joined.group.recv([buf], 0, index).wait(timeout)
            with self._cond:  # swap: the complete version becomes ready, the older ready set is reused
                spare = self._ready if self._ready is not None and len(self._ready) == len(joined.incoming) else None
                self._ready, self._ready_version = joined.incoming, version
                self._synced = joined.trainer  # holds a version of the trainer now announced
                joined.incoming = spare or [torch.empty_like(b) for b in joined.incoming]
                self._cond.notify_all()
            joined.received += 1
            seq += 1

    # -- WeightTransport -----------------------------------------------------------------------------------------------
    def publish(self, version: int, state_dict: dict[str, torch.Tensor]) -> float:
        raise RuntimeError("a generation instance receives weights; the trainer publishes them")

    def _await_first(self, timeout_s: float) -> None:
        """Start receiving; when a trainer has announced itself and the ready weights are not from it (the first
        join, or a restarted driver that may have rolled back), wait up to `timeout_s` for its catch-up version or
        the store fallback. Without a trainer yet (the driver still starting) return at once: the instance starts on
        the weights it has, and requests that need newer ones wait in `wait_for`."""
        self.start()
        trainer = self.client.hget(self.key, "trainer")
        with self._cond:
            if trainer is not None and self._synced != trainer and not self.following_store:
                self._cond.wait_for(
                    lambda: self._synced == trainer or self.following_store or self._error is not None,
                    timeout=timeout_s,
                )
            if self._error is not None:
                raise self._error

    def latest_version(self) -> int:
        self._await_first(join_timeout_s())
        if self.following_store and self.fallback is not None:
            return self.fallback.latest_version()
        with self._cond:
            return int(self._ready_version or 0)

    def wait_for(self, version: int, timeout_s: float = 300.0) -> None:
        self._await_first(timeout_s)
        if self.following_store and self.fallback is not None:
            self.fallback.wait_for(version, timeout_s)
            return
        with self._cond:
            ok = self._cond.wait_for(
                lambda: (self._ready_version or 0) >= version or self._error is not None, timeout=timeout_s
            )
            if self._error is not None:
                raise self._error
            if not ok:
                raise TimeoutError(f"weights version {version} of job {self.job_id} not received in {timeout_s}s")

    def load_into(self, engine: GenerationEngine, version: int) -> float:
        """Copy the newest complete version into `engine` in place (hf) or through its weight loader (vLLM)."""
        if self.following_store and self.fallback is not None:
            return self.fallback.load_into(engine, version)
        start = time.perf_counter()
        self.wait_for(version)
        with self._cond:
            assert self._ready is not None and self._ready_version is not None
            state: dict[str, torch.Tensor] = {}
            for bucket, flat in zip(self._buckets, self._ready, strict=True):
                state.update(bucket_views(bucket, flat))
            engine.load_tensors(self._ready_version, state)
        seconds = time.perf_counter() - start
        self.timings.entries.append(SyncTiming("load", self._ready_version, seconds))
        return seconds

    def fetch(self, version: int) -> dict[str, torch.Tensor]:
        if self.following_store and self.fallback is not None:
            return self.fallback.fetch(version)
        self.wait_for(version)
        with self._cond:
            assert self._ready is not None
            state = {}
            for bucket, flat in zip(self._buckets, self._ready, strict=True):
                state.update({k: v.clone() for k, v in bucket_views(bucket, flat).items()})
            return state

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(redis.RedisError):
            self.client.hdel(
                self.key, f"peer:{self.instance_id}", f"join:{self.instance_id}", f"store:{self.instance_id}"
            )
        if self._thread is not None:
            self._thread.join(timeout=timeout_s())


class _Unreachable(RuntimeError):
    pass
