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

from workers.weightsync.p2p.layout import (
    BUCKET_BYTES,
    Bucket,
    Slot,
    bucket_views,
    flatten_into,
    layout_json,
    parse_layout,
    plan_buckets,
)
from workers.weightsync.p2p.publisher import P2PPublisher
from workers.weightsync.p2p.receiver import P2PReceiver

__all__ = [
    "BUCKET_BYTES",
    "Bucket",
    "P2PPublisher",
    "P2PReceiver",
    "Slot",
    "bucket_views",
    "flatten_into",
    "layout_json",
    "parse_layout",
    "plan_buckets",
]
