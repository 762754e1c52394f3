"""The artifact store: where checkpoints and weight versions live beyond one host's disk.

    store = artifact_store()              # None: STREAMRL_ARTIFACTS unset, the shared artifact dir is the store
    store.put_dir(key, local_dir)         # every file, then `MANIFEST.json` last: a version without one is invisible
    store.get_dir(key, dest)              # through the worker's content-addressed cache (cache.py)

`STREAMRL_ARTIFACTS`:
  unset                  today's behaviour: every process sees one artifact directory (an NFS / RWX volume)
  file:///path or /path  a directory store (local.py): a mounted volume used as an object store, each host caching
  s3://bucket/prefix     S3-compatible object storage (s3.py): endpoint and credentials from AWS_ENDPOINT_URL,
                         AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION (boto3's usual variables)
Every key is under the team's prefix (`keys.py`).
"""

from __future__ import annotations

from contract.artifact_store.base import (
    MANIFEST,
    ArtifactStore,
    ArtifactStoreDenied,
    ArtifactStoreError,
    ArtifactStoreFull,
    Manifest,
)
from contract.artifact_store.config import artifact_store, open_store
from contract.artifact_store.keys import (
    checkpoint_key,
    checkpoints_prefix,
    dataset_key,
    weights_key,
    weights_prefix,
)

__all__ = [
    "MANIFEST", "ArtifactStore", "ArtifactStoreDenied", "ArtifactStoreError", "ArtifactStoreFull", "Manifest",
    "artifact_store", "checkpoint_key", "checkpoints_prefix", "dataset_key", "open_store", "weights_key",
    "weights_prefix",
]
