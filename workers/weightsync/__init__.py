"""Weight transports from the trainer to generation instances: shared store and torch.distributed broadcast.

    transport = setup_weight_sync(spec, root=job_dir / "weights", client=redis, job_id=7, template_dir=model_dir)
    transport.publish(version, trainer.state_dict_for_sync())      # trainer
    transport.load_into(engine, transport.latest_version())        # instance (or the colocated engine)

The runtime calls only `WeightTransport` methods. `training.weight_sync: broadcast` needs a fixed process group
(trainer + a known set of instances); jobs' instances are elastic, so such jobs run on the shared store and record
an event saying so (`FIXED_GROUP_NOTE`).
"""

from __future__ import annotations

from pathlib import Path

import redis

from contract.spec import JobSpec
from workers.weightsync.base import SyncTiming, WeightTransport
from workers.weightsync.broadcast import BroadcastTransport
from workers.weightsync.shared_store import SharedStoreTransport

FIXED_GROUP_NOTE = ("weight_sync 'broadcast' needs a fixed process group; this job's instances are elastic, so "
                    "weights go through the shared store (every sync is still timed)")


def setup_weight_sync(spec: JobSpec, *, root: Path, client: redis.Redis | None, job_id: int,
                      template_dir: Path) -> WeightTransport:
    """The job's transport (see module docstring for `broadcast`)."""
    assert spec.training.weight_sync in ("shared_store", "broadcast"), spec.training.weight_sync
    return SharedStoreTransport(root, client, job_id, template_dir=template_dir)


__all__ = ["FIXED_GROUP_NOTE", "BroadcastTransport", "SharedStoreTransport", "SyncTiming", "WeightTransport",
           "setup_weight_sync"]
