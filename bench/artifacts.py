"""Artifact store cost (contract/artifact_store): checkpoint save + load and one weight-version publish + fetch through
S3-compatible object storage (a real SeaweedFS server on loopback, tests/object_store.py) against the local artifact
directory (today's shared-volume layout), at 15M and 100M parameters, on this machine.

- checkpoint save: local = `Trainer.save_checkpoint` into the artifact dir; object store = the same save, then the
  upload the driver makes (files multipart, manifest last: contract/artifact_store/checkpoints.py) in the background
  (workers/training/checkpoint_upload.py). `save_store_s` is what the training loop waits for (the local save and
  starting the upload: the figure `artifacts_ratio_save` compares); `save_store_full_s` adds the whole upload (until
  the manifest is in the store: `ratio_save_full`).
- checkpoint load: local = `Trainer.load_checkpoint` from the artifact dir; object store = a restore (the manifest from
  the store, the files through the host's content cache, into a checkpoints dir), then the same load: on the writer's
  host, whose cache the upload filled (`load_store_s`, `ratio_load_same_host`), and on a host whose cache is empty
  (download, sha256 check: `load_cross_host_s`, `ratio_load`).
- publish + fetch, in steady state (a job publishes every iteration: each publisher's second version is timed, its
  first and the object-store publisher's once-per-process store listing are not): `SharedStoreTransport.publish`
  then `fetch` by a reader; local = one shared directory; object
  store: the publish writes the version on the writer's disk, announces it to the host (its content cache) and
  uploads it behind (workers/weightsync/version_upload.py); a reader on the writer's host (its own weights
  directory, the host's cache) links the files at once (`publish_fetch_ratio`; `publish_upload_s`: until the
  manifest is in the store, which no training step waits for unless the next publish comes first); a reader on
  another host (its own empty cache) waits for the manifest, then downloads (`publish_fetch_cross_host_ratio`).
The trainer holds AdamW state (one optimizer step taken), so a checkpoint is weights + 2x optimizer moments.
Rounds interleave local and store (which of the two runs first alternates, each after a sync); each figure is the
median over rounds.
Run: `python bench/artifacts.py [--rounds 4] [--sizes tiny-15m,tiny-100m]`.
Per size: `RESULT size=... ckpt_mb=... save_local_s=... save_store_s=... save_store_full_s=... load_local_s=...
load_store_s=... load_cross_host_s=... publish_fetch_local_s=... publish_fetch_store_s=...
publish_fetch_cross_host_s=... publish_upload_s=... upload_mb_s=... download_mb_s=...`; final line:
`RESULT artifacts_ratio_save=... ratio_save_full=... ratio_load=... ratio_load_same_host=... publish_fetch_ratio=...
publish_fetch_cross_host_ratio=... mb_s=... download_mb_s=... load1=...->... cores=...` (worst ratios over sizes;
mb_s / download_mb_s: the largest size's checkpoint upload / download throughput; load1: the 1-minute load average
before and after). Target: ratios <= 1.5.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

import torch  # noqa: E402

from contract.artifact_store import open_store  # noqa: E402
from contract.artifact_store.checkpoints import CheckpointMirror  # noqa: E402
from contract.sample import Sample  # noqa: E402
from contract.spec import JobSpec  # noqa: E402
from workers.models import build_tiny_model  # noqa: E402
from workers.training.checkpoint_upload import BackgroundUpload  # noqa: E402
from workers.training.trainer import Trainer  # noqa: E402
from workers.weightsync.shared_store import SharedStoreTransport  # noqa: E402


def _spec() -> JobSpec:
    return JobSpec.model_validate({"model": "tiny", "dataset": {"builtin": "arithmetic"},
                                   "algorithm": {"name": "grpo", "group_size": 2},
                                   "training": {"lr": 1e-4, "micro_batch_size": 2}})


def _samples() -> list[Sample]:
    return [Sample(job_id=1, prompt_id="p", group_id="p", sample_id=f"p-{i}", policy_version=0,
                   prompt_ids=[1, 5, 6, 7], response_ids=[8, 9, 10], behaviour_logprobs=[-4.0, -4.0, -4.0],
                   finish_reason="stop", reward=float(i)) for i in range(2)]


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def one_round(trainer: Trainer, state: dict[str, torch.Tensor], model_dir: Path, base: Path, url: str, job: int,
              store_first: bool) -> tuple[dict[str, float], int]:
    """One round: every figure once; `store_first` alternates which of each local/store pair runs first (the second
    of two runs finds warmer page caches and the first one's writeback still going)."""
    t: dict[str, float] = {}

    def pair(local: Callable[[], None], store: Callable[[], None]) -> None:
        for run in ((store, local) if store_first else (local, store)):
            os.sync()  # each starts with no dirty pages of the one before (or of the previous round's cleanup)
            run()

    # -- checkpoint save: the local directory vs the local save + the upload ---------------------------------------
    local = base / "local" / "iter_000001"
    staged = base / "host-a" / "iter_000001"
    mirror = CheckpointMirror(open_store(url, base / "host-a-cache"), team_id=1, job_id=job)

    def save_local() -> None:
        t["save_local"] = _timed(lambda: trainer.save_checkpoint(local, iteration=1))

    def save_store() -> None:
        saved = _timed(lambda: trainer.save_checkpoint(staged, iteration=1))
        uploads = BackgroundUpload(mirror)
        t["save_store"] = saved + _timed(lambda: uploads.start(1, staged))  # what the training loop waits for
        done = uploads.wait()
        assert done is not None and done.error is None, done
        t["upload"] = done.seconds
        t["save_store_full"] = saved + done.seconds

    pair(save_local, save_store)
    # -- checkpoint load: in place vs a restore from the store, then the same load ---------------------------------
    def load_local() -> None:
        t["load_local"] = _timed(lambda: trainer.load_checkpoint(local))

    def load_store() -> None:
        # the writer's host (its cache holds the files the upload hashed: the manifest is read and the files linked)
        same = CheckpointMirror(open_store(url, base / "host-a-cache"), team_id=1, job_id=job)
        t["load_store"] = _timed(lambda: (same.restore(base / "host-a2"),
                                          trainer.load_checkpoint(base / "host-a2" / "iter_000001")))
        # another host, its cache empty: download, sha256 check, into its checkpoints dir
        reader = CheckpointMirror(open_store(url, base / "host-b-cache"), team_id=1, job_id=job)
        os.sync()  # not behind the same-host restore's writes (before the cache held checkpoints, it downloaded too)
        t["download"] = _timed(lambda: reader.restore(base / "host-b"))
        t["load_cross_host"] = t["download"] + _timed(lambda: trainer.load_checkpoint(base / "host-b" / "iter_000001"))

    pair(load_local, load_store)
    # -- one weight version: publish + fetch -----------------------------------------------------------------------
    def pf_local() -> None:
        shared = SharedStoreTransport(base / "weights", None, 1, template_dir=model_dir)
        shared.publish(1, state), shared.fetch(1)  # steady state: a job publishes every iteration
        t["pf_local"] = _timed(lambda: (shared.publish(2, state), shared.fetch(2)))

    def pf_store() -> None:
        prefix = f"teams/1/jobs/{job}/weights"
        pub = SharedStoreTransport(base / "w-a", None, 1, template_dir=model_dir,
                                   store=open_store(url, base / "w-a-cache"), store_prefix=prefix)
        same_host = SharedStoreTransport(base / "w-a2", None, 1, follow_disk=True,
                                         store=open_store(url, base / "w-a-cache"), store_prefix=prefix)
        # steady state: the first version (and the publisher's once-per-process store listing) is not timed
        pub.publish(1, state), same_host.fetch(1)
        pub.flush()
        start = time.perf_counter()
        t["pf_store"] = _timed(lambda: (pub.publish(2, state), same_host.fetch(2)))
        pub.flush()  # the upload behind it ends before anything else is timed
        t["pf_upload"] = time.perf_counter() - start
        os.sync()
        pub2 = SharedStoreTransport(base / "w-c", None, 1, template_dir=model_dir,
                                    store=open_store(url, base / "w-c-cache"), store_prefix=prefix + "-x")
        other_host = SharedStoreTransport(base / "w-b", None, 1, follow_disk=True,
                                          store=open_store(url, base / "w-b-cache"), store_prefix=prefix + "-x")
        t["pf_cross"] = _timed(lambda: (pub2.publish(1, state), other_host.fetch(1)))
        pub2.flush()

    pair(pf_local, pf_store)
    return t, _dir_bytes(staged)


def bench_size(preset: str, rounds: int, work: Path, url: str, first_job: int) -> dict[str, float]:
    """`first_job`: every round's keys are its own (a job id per round, across sizes too)."""
    model_dir = build_tiny_model(preset, work / preset / "model", seed=0)
    trainer = Trainer(model_dir, _spec())
    trainer.train_iteration(_samples())  # AdamW moments exist from here on
    state = trainer.state_dict_for_sync()
    times: dict[str, list[float]] = {}
    size = 0
    for rnd in range(rounds):
        base = work / preset / f"r{rnd}"
        got, size = one_round(trainer, state, model_dir, base, url, job=first_job + rnd, store_first=rnd % 2 == 1)
        print(f"round {rnd} {preset} ({'store' if rnd % 2 else 'local'} first): "
              + " ".join(f"{k}={v:.3f}" for k, v in got.items()), flush=True)
        for key, value in got.items():
            times.setdefault(key, []).append(value)
        shutil.rmtree(base)
    med = {k: statistics.median(v) for k, v in times.items()}
    mb = size / 1e6
    result = {"ckpt_mb": mb, "save_local_s": med["save_local"], "save_store_s": med["save_store"],
              "save_store_full_s": med["save_store_full"],
              "load_local_s": med["load_local"], "load_store_s": med["load_store"],
              "load_cross_host_s": med["load_cross_host"],
              "publish_fetch_local_s": med["pf_local"], "publish_fetch_store_s": med["pf_store"],
              "publish_fetch_cross_host_s": med["pf_cross"], "publish_upload_s": med["pf_upload"],
              "upload_mb_s": mb / med["upload"], "download_mb_s": mb / med["download"]}
    print("RESULT size=" + preset + " " + " ".join(f"{k}={v:.3f}" for k, v in result.items()), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="even: as many rounds with local first as store first")
    parser.add_argument("--sizes", default="tiny-15m,tiny-100m")
    parser.add_argument("--store", default="", help="an s3:// URL with AWS_* set (default: a SeaweedFS started here)")
    args = parser.parse_args()
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    work = Path(tempfile.mkdtemp(prefix="bench-artifacts-"))
    server = None
    try:
        url = args.store
        if not url:
            from object_store import SeaweedS3
            server = SeaweedS3(work / "seaweed")
            server.start()
            os.environ.update(server.env())
            url = "s3://streamrl/bench"
        load_before = os.getloadavg()[0]
        results = [bench_size(size, args.rounds, work, url, first_job=1 + i * args.rounds)
                   for i, size in enumerate(args.sizes.split(","))]
        load_after = os.getloadavg()[0]
        ratio_save = max(r["save_store_s"] / r["save_local_s"] for r in results)
        ratio_full = max(r["save_store_full_s"] / r["save_local_s"] for r in results)
        ratio_load = max(r["load_cross_host_s"] / r["load_local_s"] for r in results)
        ratio_load_same = max(r["load_store_s"] / r["load_local_s"] for r in results)
        ratio_pf = max(r["publish_fetch_store_s"] / r["publish_fetch_local_s"] for r in results)
        ratio_cross = max(r["publish_fetch_cross_host_s"] / r["publish_fetch_local_s"] for r in results)
        print(f"RESULT artifacts_ratio_save={ratio_save:.2f} ratio_save_full={ratio_full:.2f} "
              f"ratio_load={ratio_load:.2f} ratio_load_same_host={ratio_load_same:.2f} "
              f"publish_fetch_ratio={ratio_pf:.2f} "
              f"publish_fetch_cross_host_ratio={ratio_cross:.2f} mb_s={results[-1]['upload_mb_s']:.1f} "
              f"download_mb_s={results[-1]['download_mb_s']:.1f} load1={load_before:.1f}->{load_after:.1f} "
              f"cores={os.cpu_count()}", flush=True)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
