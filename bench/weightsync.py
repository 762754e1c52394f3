"""Seconds per weight sync, p2p vs shared store, at 1M, 15M and ~100M parameters with 1 and 2 instances.

    python bench/weightsync.py [--models tiny-1m,tiny-15m,tiny-100m --instances 1,2 --repeats 3]

Models are built locally (workers/models/tiny.py presets, random weights, never downloaded). Each configuration
starts `instances` generation-instance PROCESSES, each with a real HF engine of the model and the transport's
instance end; the trainer end (this process) publishes the model's state dict `repeats + 1` times (the first is a
warm-up: joins, page cache, allocations). A sync is timed from the start of `publish` until the last instance has the
version loaded in its engine (`load_into`): for the shared store that is safetensors written to a directory, then
read and copied in by every instance; for p2p the buckets sent over each instance's gloo group, then copied in.
`publish_s` is the part on the trainer's critical path. Both transports run side by side (their instances all
alive, syncs alternating) so background load hits them alike; the median of the repeats is reported:

    RESULT weightsync model=tiny-100m params=99.5M transport=p2p instances=2 sync_s=... publish_s=...
    RESULT weightsync_ratio model=tiny-100m instances=2 shared_store_over_p2p=...x

Redis: STREAMRL_REDIS_URL, else an embedded one in a temp dir. The shared store lives in a temp dir on local disk.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def _instance(
    transport_name: str, redis_url: str, job_id: int, iid: str, model_dir: str, root: str, versions: int, reports: Any
) -> None:
    """One generation instance: an HF engine kept current by the transport; reports when each version is loaded.
    Shared store: woken by the store's Redis announcement (no polling, so an idle instance costs no CPU while the
    other transport is measured); p2p: by the receiver thread."""
    torch.set_num_threads(1)
    import redis

    from contract import keys
    from workers.generation.engines.hf import HFEngine
    from workers.weightsync import P2PReceiver, SharedStoreTransport

    client = redis.Redis.from_url(redis_url)
    engine = HFEngine(model_dir, max_batch_size=1)
    transport: Any
    announced: Any = None
    if transport_name == "p2p":
        transport = P2PReceiver(client, job_id, iid)
    else:
        transport = SharedStoreTransport(root, client, job_id, template_dir=model_dir)
        announced = client.pubsub(ignore_subscribe_messages=True)
        announced.subscribe(keys.weights_channel(job_id))
    first = transport.latest_version()  # p2p: joins and receives the trainer's current version
    reports.put((transport_name, iid, "ready", first, time.time()))
    for version in range(1, versions + 1):
        if announced is not None:
            while transport.latest_version() < version:
                announced.get_message(timeout=1.0)
        transport.wait_for(version, timeout_s=600)
        transport.load_into(engine, version)
        reports.put((transport_name, iid, "loaded", engine.version, time.time()))
    transport.close()


TRANSPORTS = ("shared_store", "p2p")


def _measure(
    n: int, model_dir: Path, state: dict[str, torch.Tensor], redis_url: str, repeats: int
) -> dict[str, tuple[list[float], list[float]]]:
    """Both transports side by side: `n` instances of each, syncs alternating between them (same background load)."""
    import redis

    from workers.stream import clear_job
    from workers.weightsync import P2PPublisher, SharedStoreTransport

    client = redis.Redis.from_url(redis_url)
    ctx = mp.get_context("spawn")
    queues = {name: ctx.Queue() for name in TRANSPORTS}
    jobs = {name: random.randint(10**8, 10**9) for name in TRANSPORTS}
    versions = repeats + 1
    results: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in TRANSPORTS}
    with tempfile.TemporaryDirectory(prefix="ws-store-", dir=os.environ.get("BENCH_STORE_DIR")) as root:
        publishers: dict[str, Any] = {
            "shared_store": SharedStoreTransport(root, client, jobs["shared_store"], template_dir=model_dir),
            "p2p": P2PPublisher(client, jobs["p2p"]),
        }
        publishers["p2p"].publish(0, state)  # primed, as the driver does at start
        procs = [
            ctx.Process(
                target=_instance,
                args=(name, redis_url, jobs[name], f"gen-{i}", str(model_dir), root, versions, queues[name]),
            )
            for name in TRANSPORTS
            for i in range(n)
        ]
        for proc in procs:
            proc.start()
        try:
            for name in TRANSPORTS:
                for _ in range(n):
                    assert queues[name].get(timeout=600)[2] == "ready"
            while len(publishers["p2p"].peer_ids()) < n:
                time.sleep(0.05)
            for version in range(1, versions + 1):
                for name in TRANSPORTS:
                    start = time.time()
                    publish_s = publishers[name].publish(version, state)
                    loaded = [queues[name].get(timeout=600) for _ in range(n)]
                    assert all(r[2] == "loaded" and r[3] == version for r in loaded), loaded
                    if version > 1:  # the first is the warm-up
                        results[name][0].append(max(r[4] for r in loaded) - start)
                        results[name][1].append(publish_s)
                    time.sleep(0.2)  # let the instances settle before the other transport's sync
            for proc in procs:
                proc.join(timeout=120)
        finally:
            for proc in procs:
                if proc.is_alive():
                    proc.kill()
            for name in TRANSPORTS:
                publishers[name].close()
                clear_job(client, jobs[name])
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="tiny-1m,tiny-15m,tiny-100m")
    parser.add_argument("--instances", default="1,2")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from transformers import AutoModelForCausalLM

    from workers.models import build_tiny_model

    with tempfile.TemporaryDirectory(prefix="bench-ws-") as tmp:
        redis_url = os.environ.get("STREAMRL_REDIS_URL")
        server = None
        if not redis_url:
            from backend.embedded_redis import start_embedded_redis

            server = start_embedded_redis(Path(tmp) / "data")
            redis_url = server.url
        try:
            for preset in args.models.split(","):
                model_dir = build_tiny_model(preset, Path(tmp) / preset)
                model: Any = AutoModelForCausalLM.from_pretrained(model_dir)
                state = {k: v.detach().clone() for k, v in model.state_dict().items()}  # as state_dict_for_sync
                params = sum(p.numel() for p in model.parameters())
                del model
                for n in (int(x) for x in args.instances.split(",")):
                    results = _measure(n, model_dir, state, redis_url, args.repeats)
                    medians = {name: statistics.median(results[name][0]) for name in TRANSPORTS}
                    for name in TRANSPORTS:
                        sync, publish = results[name]
                        print(
                            f"RESULT weightsync model={preset} params={params / 1e6:.1f}M transport={name} "
                            f"instances={n} sync_s={medians[name]:.3f} publish_s={statistics.median(publish):.3f} "
                            f"runs=[{', '.join(f'{x:.3f}' for x in sync)}]",
                            flush=True,
                        )
                    ratio = medians["shared_store"] / max(medians["p2p"], 1e-9)
                    print(
                        f"RESULT weightsync_ratio model={preset} instances={n} shared_store_over_p2p={ratio:.2f}x",
                        flush=True,
                    )
        finally:
            if server is not None:
                server.stop()


if __name__ == "__main__":
    main()
