"""Shared-store weight transport: versioned directories of HF safetensors on a filesystem every worker can reach.

Layout: `<root>/v000007/` holds `model.safetensors` plus the base model's config/tokenizer files, so each version is
a loadable HF model directory (engines take `update_weights(version, path(version))`); a LoRA job's versions hold
the adapter alone in PEFT layout (`adapter_model.safetensors` + `adapter_config.json`; workers/models/lora.py).
Publication is atomic: files are written to a temp directory in `root`, then renamed; a Redis key holds the latest
version and a pub/sub channel announces each new one. Old versions beyond `keep` are pruned (never the latest).

With an artifact store (STREAMRL_ARTIFACTS, contract/artifact_store/), hosts share no filesystem: the publisher writes
each version on its own disk, announces it to its host (the host's content cache) and in Redis at once, and uploads it
behind the trainer (version_upload.py: one upload at a time, every announced version reaches the store or its error
fails the next publish). A reader on the writer's host links the files straight away; a reader on another host waits
(bounded) for the version's manifest in the store, then downloads it through its content cache into its own `root`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from pathlib import Path

import redis
import torch
from safetensors.torch import load_file

from contract import keys
from contract.artifact_store import ArtifactStore, ArtifactStoreError
from contract.spec import LoraSpec
from workers.generation.engine import GenerationEngine
from workers.models import lora
from workers.models.weights_file import save_weights, storable
from workers.weightsync.base import WeightTransport
from workers.weightsync.version_upload import UPLOAD_WAIT_S, VersionUploads, await_version

WEIGHTS_FILE = "model.safetensors"
_TEMPLATE_SUFFIXES = (".json", ".txt", ".model")


class SharedStoreTransport(WeightTransport):
    def __init__(self, root: str | Path, client: redis.Redis | None, job_id: int,
                 template_dir: str | Path | None = None, keep: int = 4, follow_disk: bool = False,
                 lora_spec: LoraSpec | None = None, store: ArtifactStore | None = None, store_prefix: str = "",
                 upload_wait_s: float = UPLOAD_WAIT_S):
        """`lora_spec`: the job trains a LoRA adapter (published state dicts are adapters); `client` None: one process
        publishes and loads (train-local), the latest version is kept in memory;
        `follow_disk`: the latest version is the newest complete directory (a reader without the Redis key: an
        instance of an `auto` p2p job that cannot reach the trainer); `store`: versions also go to (and come from)
        the artifact store under `store_prefix` (contract/artifact_store/keys.py `weights_prefix`); `upload_wait_s`: how
        long a reader on another host waits for an announced version to reach the store."""
        super().__init__()
        self._latest, self.follow_disk = 0, follow_disk
        self.root, self.client, self.job_id, self.keep = Path(root), client, job_id, keep
        self.template_dir = Path(template_dir) if template_dir else None
        self.lora_spec = lora_spec
        self.store, self.store_prefix, self.upload_wait_s = store, store_prefix, upload_wait_s
        self.uploads = VersionUploads(store, client, job_id) if store is not None else None
        self._stored: set[int] | None = None  # versions that may be complete in the store: listed at the first
        # publish, then every upload since (a restarted driver's store may hold its dead epoch's versions)
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, version: int) -> Path:
        return self.root / f"v{version:06d}"

    def _store_key(self, version: int) -> str:
        return f"{self.store_prefix}/v{version:06d}"

    def local_path(self, version: int) -> Path:
        """The version's directory on this host, downloaded from the artifact store when only the store has it."""
        path = self.path(version)
        if self.store is not None and not path.is_dir():
            key = self._store_key(version)
            if not self.store.get_local(key, path):  # the writer's host: its files, whether uploaded yet or not
                await_version(self.store, key, version, self.client, self.job_id, self.upload_wait_s)
                self.store.get_dir(key, path)
        return path

    def publish(self, version: int, state_dict: dict[str, torch.Tensor]) -> float:
        with self._timed("publish", version):
            tmp = self.root / f".tmp-{version}-{uuid.uuid4().hex[:8]}"
            tmp.mkdir()
            if self.lora_spec is not None and lora.is_adapter(state_dict):
                adapter = storable(state_dict)
                lora.write_adapter(tmp, adapter, lora.adapter_config_json(self.lora_spec, adapter))
            else:
                save_weights(state_dict, tmp / WEIGHTS_FILE)
            self._copy_template(tmp)
            self._install(tmp, version)
        return self.timings.last_seconds

    def publish_dir(self, version: int, source: str | Path) -> float:
        """Publish an already exported HF directory (copied, then atomically renamed into place)."""
        with self._timed("publish", version):
            tmp = self.root / f".tmp-{version}-{uuid.uuid4().hex[:8]}"
            shutil.copytree(source, tmp)
            self._install(tmp, version)
        return self.timings.last_seconds

    def _copy_template(self, target: Path) -> None:
        if self.template_dir is None:
            return
        for item in self.template_dir.iterdir():
            if item.is_file() and item.suffix in _TEMPLATE_SUFFIXES:
                shutil.copy2(item, target / item.name)

    def _install(self, tmp: Path, version: int) -> None:
        if self.uploads is not None:
            try:  # the previous version is in the store before this one is announced (or its error ends here)
                self.uploads.wait()
                self._retract_stale(version)
            except ArtifactStoreError:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        final = self.path(version)
        if final.exists():  # a retried publish of the same version: the newer files win
            if self.store is not None:
                self.store.withdraw_local(self._store_key(version))
            shutil.rmtree(final)
        os.rename(tmp, final)
        if self.store is not None:  # readers on this host link it now; the others wait for its manifest
            self.store.announce_local(self._store_key(version), final)
        self._latest = version
        if self.client is not None:
            self.client.set(keys.weights_latest(self.job_id), version)
            self.client.publish(keys.weights_channel(self.job_id), version)
        gone = self._prune(version)
        if self.uploads is not None:
            self.uploads.start(version, self._store_key(version), final, after=lambda: self._delete_stored(gone))

    def _retract_stale(self, version: int) -> None:
        """Before `version` is announced, no older write of it is visible in the store (a dead driver epoch's, or this
        process's earlier publish of the same number): a reader on another host waiting for its manifest gets this
        write's. One listing per process, then a request only when a version number is published again."""
        assert self.store is not None
        if self._stored is None:
            names = self.store.versions(self.store_prefix)
            self._stored = {int(n[1:]) for n in names if n.startswith("v") and n[1:].isdigit()}
        if version in self._stored:
            self.store.retract(self._store_key(version))
        self._stored.add(version)  # from here on its upload may complete

    def _prune(self, latest: int) -> list[int]:
        """Keep the newest `keep` versions up to `latest`; versions above it belong to an abandoned driver epoch (a
        restarted driver republished its checkpoint's older weights) and go. Returns the versions removed (the store's
        copies go after the next upload, off the publish)."""
        versions = self._local_versions()
        kept = [v for v in versions if v <= latest]
        gone = [v for v in versions if v > latest] + kept[: max(0, len(kept) - self.keep)]
        for version in gone:
            if self.store is not None:  # before its files: a reader here never links a half-removed version
                self.store.withdraw_local(self._store_key(version))
            shutil.rmtree(self.path(version), ignore_errors=True)
        return gone

    def _delete_stored(self, gone: list[int]) -> None:
        assert self.store is not None and self._stored is not None
        for version in gone:
            self._stored.discard(version)
            # a stale version left in the store is only space: readers ask for the announced versions
            with contextlib.suppress(ArtifactStoreError):
                self.store.delete(self._store_key(version))

    def flush(self) -> None:
        """Wait until the newest published version is in the store; raise its upload's error."""
        if self.uploads is not None:
            self.uploads.wait()

    def close(self) -> None:
        if self.uploads is not None:
            self.uploads.close()

    def latest_version(self) -> int:
        if self.follow_disk:
            found = self._versions()
            return found[-1] if found else 0
        if self.client is None:
            return self._latest
        raw = self.client.get(keys.weights_latest(self.job_id))
        if raw is not None:
            return int(raw)
        on_disk = self._versions()  # Redis lost the key (restart): the newest complete directory is the latest
        return on_disk[-1] if on_disk else 0

    def _versions(self) -> list[int]:
        """The complete versions: in the artifact store (or announced on this host) when there is one, else on this
        host's disk."""
        if self.store is not None:  # and those announced on this host, which readers here link before their upload
            names = set(self.store.versions(self.store_prefix)) | set(self.store.local_versions(self.store_prefix))
            return sorted(int(n[1:]) for n in names if n.startswith("v") and n[1:].isdigit())
        return self._local_versions()

    def _local_versions(self) -> list[int]:
        return sorted(int(p.name[1:]) for p in self.root.glob("v[0-9]*") if p.name[1:].isdigit())

    def wait_for(self, version: int, timeout_s: float = 60.0, poll_s: float = 0.05) -> None:
        """Block until `version` (or a newer one) is published."""
        deadline = time.monotonic() + timeout_s
        while self.latest_version() < version:
            if time.monotonic() > deadline:
                raise TimeoutError(f"weights version {version} of job {self.job_id} not published in {timeout_s}s")
            time.sleep(poll_s)

    def load_into(self, engine: GenerationEngine, version: int) -> float:
        """The engine reads the version's directory itself (vLLM `reload_weights`, hf in-place copy)."""
        start = time.perf_counter()
        self.wait_for(version)
        engine.update_weights(version, self.local_path(version))
        return time.perf_counter() - start

    def fetch(self, version: int) -> dict[str, torch.Tensor]:
        with self._timed("fetch", version):
            self.wait_for(version)
            directory = self.local_path(version)
            adapter = directory / lora.ADAPTER_WEIGHTS
            state = load_file(str(adapter if adapter.exists() else directory / WEIGHTS_FILE))
        return state
