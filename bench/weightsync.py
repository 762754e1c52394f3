"""Seconds per weight sync, p2p vs shared store, at 1M, 15M and ~100M parameters with 1 and 2 instances.

    python bench/weightsync.py [--models tiny-1m,tiny-15m,tiny-100m --instances 1,2 --repeats 3]

Models are built locally (workers/models/tiny.py presets, random weights, never downloaded). Each configuration
starts `instances` generation-instance PROCESSES, each with a real HF engine of the model and the transport's
instance end; the trainer end (this process) publishes the model's state dict `repeats + 1` times (the first is a
warm-up: joins, page cache, allocations). A sync is timed from the start of `publish` until the last instance has the
version loaded in its engine (`load_into`): for the shared store that is safetensors written to a directory, then
read and copied in by every instance; for p2p the buckets sent over each instance's gloo group, then copied in.
`publish_s` is the part on the trainer's critical path. The median of the repeats is reported:

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
    """One generation instance: an HF engine kept current by the transport; reports when each version is loaded."""
    torch.set_num_threads(1)
    import redis

    from workers.generation.engines.hf import HFEngine
    from workers.weightsync import P2PReceiver, SharedStoreTransport

    client = redis.Redis.from_url(redis_url)
    engine = HFEngine(model_dir, max_batch_size=1)
    transport: Any
    if transport_name == "p2p":
        transport = P2PReceiver(client, job_id, iid)
    else:
        transport = SharedStoreTransport(root, client, job_id, template_dir=model_dir)
    first = transport.latest_version()  # p2p: joins and receives the trainer's current version
    reports.put((iid, "ready", first, time.time()))
    for version in range(1, versions + 1):
        if transport_name == "p2p":
            transport.wait_for(version, timeout_s=600)
        else:
            transport.wait_for(version, timeout_s=600, poll_s=0.002)
        transport.load_into(engine, version)
        reports.put((iid, "loaded", engine.version, time.time()))
    transport.close()


def _measure(
    transport_name: str, n: int, model_dir: Path, state: dict[str, torch.Tensor], redis_url: str, repeats: int
) -> tuple[list[float], list[float]]:
    import redis

    from workers.stream import clear_job
    from workers.weightsync import P2PPublisher, SharedStoreTransport

    client = redis.Redis.from_url(redis_url)
    job_id = random.randint(10**8, 10**9)
    ctx = mp.get_context("spawn")
    reports = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="ws-store-", dir=os.environ.get("BENCH_STORE_DIR")) as root:
        publisher: Any
        if transport_name == "p2p":
            publisher = P2PPublisher(client, job_id)
            publisher.publish(0, state)  # primed, as the driver does at start
        else:
            publisher = SharedStoreTransport(root, client, job_id, template_dir=model_dir)
        versions = repeats + 1
        procs = [
            ctx.Process(
                target=_instance,
                args=(transport_name, redis_url, job_id, f"gen-{i}", str(model_dir), root, versions, reports),
            )
            for i in range(n)
        ]
        for proc in procs:
            proc.start()
        try:
            for _ in range(n):
                iid, kind, _, _ = reports.get(timeout=600)
                assert kind == "ready", (iid, kind)
            if transport_name == "p2p":
                while len(publisher.peer_ids()) < n:
                    time.sleep(0.05)
            sync, publish = [], []
            for version in range(1, versions + 1):
                start = time.time()
                publish_s = publisher.publish(version, state)
                loaded = [reports.get(timeout=600) for _ in range(n)]
                assert all(r[1] == "loaded" and r[2] == version for r in loaded), loaded
                if version > 1:  # the first is the warm-up
                    sync.append(max(r[3] for r in loaded) - start)
                    publish.append(publish_s)
            for proc in procs:
                proc.join(timeout=120)
        finally:
            for proc in procs:
                if proc.is_alive():
                    proc.kill()
            publisher.close()
            clear_job(client, job_id)
    return sync, publish


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="tiny-1m,tiny-15m,tiny-100m")
    parser.add_argument("--instances", default="1,2")
    parser.add_argument("--repeats", type=int, default=3)
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
                medians: dict[tuple[str, int], float] = {}
                for n in (int(x) for x in args.instances.split(",")):
                    for transport in ("shared_store", "p2p"):
                        sync, publish = _measure(transport, n, model_dir, state, redis_url, args.repeats)
                        medians[(transport, n)] = statistics.median(sync)
                        print(
                            f"RESULT weightsync model={preset} params={params / 1e6:.1f}M transport={transport} "
                            f"instances={n} sync_s={statistics.median(sync):.3f} "
                            f"publish_s={statistics.median(publish):.3f} "
                            f"runs=[{', '.join(f'{s:.3f}' for s in sync)}]",
                            flush=True,
                        )
                    ratio = medians[("shared_store", n)] / max(medians[("p2p", n)], 1e-9)
                    print(
                        f"RESULT weightsync_ratio model={preset} instances={n} shared_store_over_p2p={ratio:.2f}x",
                        flush=True,
                    )
        finally:
            if server is not None:
                server.stop()


if __name__ == "__main__":
    main()
