"""Point-to-point weight transport: trainer rank 0 -> every generation instance over torch.distributed.

Each instance has its own two-rank process group with the trainer (rank 0 = trainer, rank 1 = the instance) on a
TCPStore the trainer hosts on a port of its own, the way verl/OpenRLHF build one group per vLLM engine: instances
come and go, so a group is created when an instance joins and dropped when it leaves or dies. gloo over TCP on CPU,
NCCL when both sides have a GPU.

Rendezvous (Redis hash `keys.weights_p2p(job)`):

    trainer  `trainer`        {host, epoch}                 written by every publish (the newest driver wins)
    instance `join:<iid>`     {nonce, host, cuda}           asks to join
    trainer  `accept:<iid>`   {nonce, host, port, backend}  a TCPStore is listening there; the store's `layout`
                                                            key holds the bucket layout, then both build the group
    instance `peer:<iid>`     epoch                         joined; deleting it means "leaving" (dropped at once)
    instance `store:<iid>`    time                          (auto) cannot reach the trainer: follows the shared store

Per version the trainer sets the store key `v/<seq>` = {version} for that peer, then sends the weights as flat
buckets (`BUCKET_BYTES`, one dtype each): every joined peer receives bucket i concurrently (one in-flight send per
peer) while bucket i + 1 is built, so the trainer holds two buckets besides the state dict. A peer whose send fails or
times out (`STREAMRL_P2P_TIMEOUT_S`) is dropped and never blocks the others. A joining instance first gets the
trainer's current version (catch-up), under the same lock as publishes, so it misses none.

The receiver (instance) receives in a background thread into one set of flat buffers and swaps them with a second
set when a version is complete; the generation loop copies the ready set into the engine (`load_into`) between
engine steps, so versions are applied whole and in order (a newer ready version supersedes an unapplied older one).

`auto`: an instance that cannot reach the trainer's TCPStore follows the shared store instead (`store:<iid>`); while
such instances exist the trainer also writes each version to the shared store. Ports: `STREAMRL_P2P_PORTS=lo-hi`
bounds the TCPStore ports; `STREAMRL_P2P_HOST` sets the address the trainer advertises (default: the address of its
interface that routes to Redis). gloo/NCCL data connections use ephemeral ports in both directions (docs/operator.md).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import redis
import torch
import torch.distributed as dist

from contract import keys
from workers.generation.engine import GenerationEngine
from workers.weightsync.base import SyncTiming, WeightTransport
from workers.weightsync.shared_store import SharedStoreTransport

log = logging.getLogger(__name__)
BUCKET_BYTES = 256 * 1024 * 1024
POLL_S = 0.1  # rendezvous polls (Redis)
JOIN_ATTEMPTS = 3  # consecutive failed joins (other than an unreachable trainer) before the instance gives up
ANNOUNCE_POLL_S = 0.005  # an instance checks its own TCPStore for the next version (a local round trip)


def _timeout_s() -> float:
    return float(os.environ.get("STREAMRL_P2P_TIMEOUT_S", "60"))


def _join_timeout_s() -> float:
    return float(os.environ.get("STREAMRL_P2P_JOIN_TIMEOUT_S", "60"))


# -- bucket layout ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Slot:
    name: str
    shape: tuple[int, ...]
    offset: int  # in elements, within the bucket
    numel: int


@dataclass(frozen=True)
class Bucket:
    dtype: str  # "float32", "bfloat16", ...
    numel: int
    slots: tuple[Slot, ...]

    @property
    def torch_dtype(self) -> torch.dtype:
        dtype: torch.dtype = getattr(torch, self.dtype)
        return dtype


def plan_buckets(state: dict[str, torch.Tensor], bucket_bytes: int = BUCKET_BYTES) -> list[Bucket]:
    """Flat buckets of at most `bucket_bytes` (a larger tensor gets one of its own), one dtype each, names sorted."""
    by_dtype: dict[str, list[str]] = {}
    for name in sorted(state):
        by_dtype.setdefault(str(state[name].dtype).removeprefix("torch."), []).append(name)
    buckets: list[Bucket] = []
    for dtype, names in sorted(by_dtype.items()):
        slots: list[Slot] = []
        used = 0
        for name in names:
            tensor = state[name]
            if slots and (used + tensor.numel()) * tensor.element_size() > bucket_bytes:
                buckets.append(Bucket(dtype, used, tuple(slots)))
                slots, used = [], 0
            slots.append(Slot(name, tuple(tensor.shape), used, tensor.numel()))
            used += tensor.numel()
        if slots:
            buckets.append(Bucket(dtype, used, tuple(slots)))
    return buckets


def layout_json(buckets: list[Bucket]) -> str:
    return json.dumps([asdict(b) for b in buckets])


def parse_layout(text: str) -> list[Bucket]:
    return [
        Bucket(
            b["dtype"],
            b["numel"],
            tuple(Slot(s["name"], tuple(s["shape"]), s["offset"], s["numel"]) for s in b["slots"]),
        )
        for b in json.loads(text)
    ]


def flatten_into(bucket: Bucket, state: dict[str, torch.Tensor], out: torch.Tensor) -> torch.Tensor:
    flat = out[: bucket.numel]
    for slot in bucket.slots:
        flat[slot.offset : slot.offset + slot.numel].copy_(state[slot.name].reshape(-1))
    return flat


def bucket_views(bucket: Bucket, flat: torch.Tensor) -> dict[str, torch.Tensor]:
    return {s.name: flat[s.offset : s.offset + s.numel].view(s.shape) for s in bucket.slots}


# -- process groups ---------------------------------------------------------------------------------------------------
def _route_ip(host: str) -> str:
    """The local address of the interface that routes to `host` (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((socket.gethostbyname(host), 9))
            return str(probe.getsockname()[0])
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def _redis_host(client: redis.Redis) -> str:
    host = client.connection_pool.connection_kwargs.get("host")
    return str(host) if host else "127.0.0.1"


def _port_range() -> list[int]:
    raw = os.environ.get("STREAMRL_P2P_PORTS", "").strip()
    if not raw:
        return [0]  # any free port
    lo, _, hi = raw.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def _listen_store(timeout: timedelta) -> dist.TCPStore:
    """A TCPStore master on the first free port of `STREAMRL_P2P_PORTS` (any free port when unset). The server
    listens on every interface; the host given here is only where the master's own client connects."""
    last: Exception | None = None
    for port in _port_range():
        try:
            return dist.TCPStore("127.0.0.1", port, 2, is_master=True, wait_for_workers=False, timeout=timeout)
        except Exception as err:  # port taken: try the next one
            last = err
    raise RuntimeError(
        f"no free port for p2p weight sync in STREAMRL_P2P_PORTS={os.environ.get('STREAMRL_P2P_PORTS')}: {last}"
    )


def _backend(both_cuda: bool) -> str:
    """`STREAMRL_P2P_BACKEND`: gloo, nccl or auto (the default: NCCL when both ends have a GPU, else gloo)."""
    choice = os.environ.get("STREAMRL_P2P_BACKEND", "auto")
    if choice not in ("auto", "gloo", "nccl"):
        raise ValueError(f"STREAMRL_P2P_BACKEND must be auto, gloo or nccl, not {choice!r}")
    if choice == "nccl" and not both_cuda:
        raise ValueError("STREAMRL_P2P_BACKEND=nccl needs CUDA on the trainer and on the instance")
    return "nccl" if choice == "nccl" or (choice == "auto" and both_cuda) else "gloo"


def _group(backend: str, store: dist.TCPStore, rank: int, local_ip: str, timeout: timedelta) -> Any:
    """The two-rank group on `store` (never the process's default group: vLLM may hold one); its rendezvous keys
    live under a prefix, apart from the transport's own `layout` and `v/<seq>` keys."""
    prefixed = dist.PrefixStore("group", store)
    gloo: Any = dist.ProcessGroupGloo  # `_Options` (timeout + devices) is missing from torch's stubs
    if backend == "gloo":
        opts = gloo._Options()
        opts._timeout = timeout
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname=local_ip)]
        return gloo(prefixed, rank, 2, opts)
    nccl = torch.distributed.distributed_c10d.ProcessGroupNCCL  # CUDA builds only
    opts = nccl.Options()
    opts._timeout = timeout
    return nccl(prefixed, rank, 2, opts)


# -- trainer side -----------------------------------------------------------------------------------------------------
@dataclass
class _Peer:
    instance_id: str
    store: Any
    group: Any
    backend: str = "gloo"
    seq: int = 0

    def close(self) -> None:
        self.group = None
        self.store = None


class P2PPublisher(WeightTransport):
    """Trainer rank 0. `store` (auto only): the shared store written for instances that cannot reach the trainer."""

    serves_joiners = True

    def __init__(
        self,
        client: redis.Redis,
        job_id: int,
        *,
        epoch: int = 0,
        device: str = "cpu",
        store: SharedStoreTransport | None = None,
        bucket_bytes: int = BUCKET_BYTES,
        host: str | None = None,
    ):
        super().__init__()
        self.client, self.job_id, self.epoch, self.store = client, job_id, epoch, store
        self.device = torch.device(device)
        self.bucket_bytes = bucket_bytes
        self.host = host or os.environ.get("STREAMRL_P2P_HOST") or _route_ip(_redis_host(client))
        self.key = keys.weights_p2p(job_id)
        self.peers: dict[str, _Peer] = {}
        self.dropped: list[tuple[str, str]] = []  # (instance id, why)
        self._notes: list[str] = []
        self._lock = threading.RLock()  # one send at a time: publishes and catch-ups never interleave per peer
        self._last: tuple[int, dict[str, torch.Tensor]] | None = None
        self._buckets: list[Bucket] = []
        self._layout = ""
        self._buffers: dict[str, torch.Tensor] = {}
        self._store_followers: set[str] = set()
        self._joining: set[str] = set()
        self._stop = threading.Event()
        self._acceptor: threading.Thread | None = None

    # -- publish -------------------------------------------------------------------------------------------------------
    def publish(self, version: int, state_dict: dict[str, torch.Tensor]) -> float:
        with self._timed("publish", version), self._lock:
            self._set_layout(state_dict)
            self._last = (version, state_dict)
            self._drop_leavers()
            self._send(version, state_dict, list(self.peers.values()))
            if self.store is not None and self._store_followers:
                self.store.publish(version, state_dict)
            self.client.hset(self.key, "trainer", json.dumps({"host": self.host, "epoch": self.epoch}))
            self.client.set(keys.weights_latest(self.job_id), version)
            self.client.publish(keys.weights_channel(self.job_id), version)
        if self._acceptor is None:
            self._acceptor = threading.Thread(target=self._accept_loop, name=f"p2p-accept-{self.job_id}", daemon=True)
            self._acceptor.start()
        return self.timings.last_seconds

    def _set_layout(self, state: dict[str, torch.Tensor]) -> None:
        buckets = plan_buckets(state, self.bucket_bytes)
        layout = layout_json(buckets)
        if self._layout and layout != self._layout:
            raise ValueError(
                "the published state dict changed names, shapes or dtypes; p2p weight sync needs a fixed layout"
            )
        self._buckets, self._layout = buckets, layout

    def _buffer(self, bucket: Bucket, slot: int) -> torch.Tensor:
        """Two reusable flat buffers per dtype (`slot` 0/1), as large as that dtype's largest bucket: bucket i + 1 is
        built while bucket i is on the wire."""
        need = max(b.numel for b in self._buckets if b.dtype == bucket.dtype)
        key = f"{bucket.dtype}/{slot}"
        buf = self._buffers.get(key)
        if buf is None or buf.numel() < need:
            buf = torch.empty(need, dtype=bucket.torch_dtype)  # CPU, like the state dict; NCCL peers get a copy
            self._buffers[key] = buf
        return buf

    def _send(self, version: int, state: dict[str, torch.Tensor], peers: list[_Peer]) -> None:
        """Send `version` to `peers`: per bucket, one send in flight to every peer (the next bucket is flattened
        meanwhile), then wait for all of them; a peer that fails is dropped, the others go on."""
        timeout = timedelta(seconds=_timeout_s())
        live = []
        for peer in peers:
            try:
                peer.store.set(f"v/{peer.seq}", json.dumps({"version": version}))
                live.append(peer)
            except Exception as err:
                self._drop(peer, f"announce failed: {err}")
        flat = flatten_into(self._buckets[0], state, self._buffer(self._buckets[0], 0)) if self._buckets else None
        for index, _bucket in enumerate(self._buckets):
            if not live or flat is None:
                break
            works = []
            on_gpu = flat.to(self.device) if any(p.backend == "nccl" for p in live) else None
            for peer in live:
                try:
                    works.append((peer, peer.group.send([on_gpu if peer.backend == "nccl" else flat], 1, index)))
                except Exception as err:
                    self._drop(peer, f"send failed: {err}")
            following = self._buckets[index + 1] if index + 1 < len(self._buckets) else None
            flat = flatten_into(following, state, self._buffer(following, (index + 1) % 2)) if following else None
            live = []
            for peer, work in works:
                try:
                    work.wait(timeout)
                    live.append(peer)
                except Exception as err:
                    self._drop(peer, f"send failed or timed out: {err}")
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # NCCL work completes asynchronously: publish ends when it is done
        for peer in live:
            peer.seq += 1

    def _drop(self, peer: _Peer, why: str) -> None:
        log.warning("job %s: p2p weight sync drops instance %s (%s)", self.job_id, peer.instance_id, why)
        self.dropped.append((peer.instance_id, why))
        self._notes.append(f"instance {peer.instance_id} left p2p weight sync ({why})")
        if self.peers.get(peer.instance_id) is peer:
            del self.peers[peer.instance_id]
        peer.close()

    def _drop_leavers(self) -> None:
        names: Any = self.client.hkeys(self.key)
        fields = {_text(k) for k in names}
        for peer in list(self.peers.values()):
            if f"peer:{peer.instance_id}" not in fields:
                self._drop(peer, "stopped")
        self._store_followers &= {f.split(":", 1)[1] for f in fields if f.startswith("store:")}

    # -- joins ---------------------------------------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                raw: Any = self.client.hgetall(self.key)
                fields = {_text(k): _text(v) for k, v in raw.items()}
                for name, value in fields.items():
                    kind, _, iid = name.partition(":")
                    if kind == "join" and iid not in self._joining:
                        self.client.hdel(self.key, name)
                        self._joining.add(iid)
                        threading.Thread(
                            target=self._handshake, args=(iid, json.loads(value)), daemon=True, name=f"p2p-join-{iid}"
                        ).start()
                    elif kind == "store" and iid not in self._store_followers and self.store is not None:
                        self._catch_up_store(iid)
            except Exception:  # Redis hiccup: try again next poll
                log.exception("job %s: p2p acceptor", self.job_id)

    def _catch_up_store(self, iid: str) -> None:
        with self._lock:
            self._store_followers.add(iid)
            self._notes.append(
                f"instance {iid} cannot reach the trainer: it follows the shared store, which the "
                "trainer now also writes"
            )
            if self._last is not None and self.store is not None and self.store.latest_version() != self._last[0]:
                self.store.publish(*self._last)

    def _handshake(self, iid: str, request: dict[str, Any]) -> None:
        timeout = timedelta(seconds=_join_timeout_s())
        try:
            store = _listen_store(timeout)
            store.set("layout", self._layout)
            backend = _backend(self.device.type == "cuda" and bool(request.get("cuda")))
            self.client.hset(
                self.key,
                f"accept:{iid}",
                json.dumps({"nonce": request["nonce"], "host": self.host, "port": store.port, "backend": backend}),
            )
            group = _group(backend, store, 0, self.host, timeout)
            peer = _Peer(iid, store, group, backend)
            with self._lock:
                if self._stop.is_set():  # the trainer closed meanwhile
                    peer.close()
                    return
                old = self.peers.pop(iid, None)
                if old is not None:
                    old.close()
                if self._last is not None:
                    self._send(self._last[0], self._last[1], [peer])  # catch-up: the current version first
                if peer.group is not None:
                    self.peers[iid] = peer
                    self._notes.append(f"instance {iid} joined p2p weight sync ({backend}, port {store.port})")
            log.info("job %s: instance %s joined p2p weight sync (%s, port %s)", self.job_id, iid, backend, store.port)
        except Exception as err:
            log.warning("job %s: instance %s could not join p2p weight sync: %s", self.job_id, iid, err)
            with self._lock:
                self.dropped.append((iid, f"join failed: {err}"))
                self._notes.append(f"instance {iid} could not join p2p weight sync: {err}")
        finally:
            self._joining.discard(iid)

    # -- the rest of the transport -------------------------------------------------------------------------------------
    def take_notes(self) -> list[str]:
        with self._lock:
            notes, self._notes = self._notes, []
        return notes

    def peer_ids(self) -> list[str]:
        with self._lock:
            return sorted(self.peers)

    def fetch(self, version: int) -> dict[str, torch.Tensor]:
        if self._last is None or self._last[0] != version:
            raise KeyError(f"the trainer holds weights version {self._last[0] if self._last else None}, not {version}")
        return self._last[1]

    def latest_version(self) -> int:
        raw: Any = self.client.get(keys.weights_latest(self.job_id))
        return int(raw) if raw is not None else 0

    def wait_for(self, version: int, timeout_s: float = 60.0) -> None:
        if self.latest_version() < version:
            raise RuntimeError(f"the trainer has not published weights version {version}")

    def close(self) -> None:
        self._stop.set()
        if self._acceptor is not None:
            self._acceptor.join(timeout=5)
        with self._lock:
            for peer in list(self.peers.values()):
                peer.close()
            self.peers.clear()
            self._last = None
            self._buffers.clear()


# -- instance side ----------------------------------------------------------------------------------------------------
class _Joined:
    def __init__(self, store: Any, group: Any, buckets: list[Bucket], device: torch.device, trainer: Any):
        self.store, self.group, self.buckets, self.trainer = store, group, buckets, trainer
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
            failures = 0
            try:
                self._receive(joined)
            except Exception as err:  # the trainer went away (driver restart) or dropped us: join again
                if self._stop.is_set():
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
                    json.dumps({"nonce": nonce, "cuda": self.device.type == "cuda"}),
                )
            raw = self.client.hget(self.key, f"accept:{self.instance_id}") if nonce else None
            reply = json.loads(_text(raw)) if raw is not None else None
            if reply is not None and reply.get("nonce") == nonce:
                break
            if self._stop.wait(POLL_S):
                raise InterruptedError("closing")
        timeout = timedelta(seconds=_join_timeout_s())
        try:
            store = dist.TCPStore(
                reply["host"],
                reply["port"],
                2,
                is_master=False,
                timeout=timedelta(seconds=min(10.0, _join_timeout_s())),
            )
        except Exception as err:
            raise _Unreachable(f"cannot reach the trainer at {reply['host']}:{reply['port']} ({err})") from err
        store.set_timeout(timeout)
        buckets = parse_layout(_text(store.get("layout")))
        group = _group(reply["backend"], store, 1, _route_ip(reply["host"]), timeout)
        self.client.hset(self.key, f"peer:{self.instance_id}", time.time())
        self.joins += 1
        self._buckets = buckets
        device = self.device if reply["backend"] == "nccl" else torch.device("cpu")  # gloo sends CPU tensors
        return _Joined(store, group, buckets, device, announced)

    def _receive(self, joined: _Joined) -> None:
        seq, timeout = 0, timedelta(seconds=_timeout_s())
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
            version = int(json.loads(_text(joined.store.get(key)))["version"])
            for index, buf in enumerate(joined.incoming):
                joined.group.recv([buf], 0, index).wait(timeout)
            with self._cond:  # swap: the complete version becomes ready, the older ready set is reused
                spare = self._ready if self._ready is not None and len(self._ready) == len(joined.incoming) else None
                self._ready, self._ready_version = joined.incoming, version
                self._synced = joined.trainer  # holds a version of the trainer now announced
                joined.incoming = spare or [torch.empty_like(b) for b in joined.incoming]
                self._cond.notify_all()
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
        self._await_first(_join_timeout_s())
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
            self._thread.join(timeout=_timeout_s())


class _Unreachable(RuntimeError):
    pass


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
