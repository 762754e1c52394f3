"""The trainer's end of p2p weight sync (rank 0 of every instance's group); the protocol is in __init__.py."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import redis
import torch

from contract import keys
from workers.addresses import advertised_host
from workers.weightsync.base import WeightTransport
from workers.weightsync.p2p.groups import (
    POLL_S,
    gpu_identity,
    join_timeout_s,
    listen_store,
    make_group,
    pick_backend,
    text_of,
    timeout_s,
)
from workers.weightsync.p2p.layout import (
    BUCKET_BYTES,
    Bucket,
    flatten_into,
    layout_json,
    plan_buckets,
)
from workers.weightsync.shared_store import SharedStoreTransport

log = logging.getLogger(__name__)


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
        self.host = host or advertised_host(client, "STREAMRL_P2P_HOST")
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
        timeout = timedelta(seconds=timeout_s())
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
        fields = {text_of(k) for k in names}
        for peer in list(self.peers.values()):
            if f"peer:{peer.instance_id}" not in fields:
                self._drop(peer, "stopped")
        self._store_followers &= {f.split(":", 1)[1] for f in fields if f.startswith("store:")}

    # -- joins ---------------------------------------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                raw: Any = self.client.hgetall(self.key)
                fields = {text_of(k): text_of(v) for k, v in raw.items()}
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
        timeout = timedelta(seconds=join_timeout_s())
        try:
            store = listen_store(timeout)
            store.set("layout", self._layout)
            backend = pick_backend(self.device.type == "cuda", bool(request.get("cuda")), gpu_identity(self.device),
                                   request.get("gpu"))
            self.client.hset(
                self.key,
                f"accept:{iid}",
                json.dumps({"nonce": request["nonce"], "host": self.host, "port": store.port, "backend": backend}),
            )
            group = make_group(backend, store, 0, self.host, timeout)
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
        if self.store is not None:  # its last version's upload ends (or says why it failed)
            self.store.close()
