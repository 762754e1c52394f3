"""Weight transports from the trainer to generation instances: point-to-point torch.distributed and shared store.

    transport = setup_weight_sync(spec, root=job_dir / "weights", client=redis, job_id=7, template_dir=model_dir)
    transport.publish(version, trainer.state_dict_for_sync())      # trainer
    transport.load_into(engine, transport.latest_version())        # instance (or the colocated engine)

`training.weight_sync`:
  shared_store  versioned safetensors directories on the artifact store (shared_store.py)
  p2p           the trainer sends each version to every instance over its own two-rank process group (p2p/)
  auto          p2p for every instance that can reach the trainer; an instance that cannot follows the shared store,
                which the trainer then also writes
Colocated jobs (one process) and train-local (no Redis) always use the shared store. A LoRA job (`training.lora`)
ships only its adapter, through either transport. The runtime calls only `WeightTransport` methods; the trainer's
end is built without `instance_id`, an instance's with it.
"""

from __future__ import annotations

from pathlib import Path

import redis

from contract.artifact_store import artifact_store, weights_prefix
from contract.spec import JobSpec
from workers.weightsync.base import SyncTiming, WeightTransport
from workers.weightsync.p2p import P2PPublisher, P2PReceiver
from workers.weightsync.shared_store import SharedStoreTransport


def setup_weight_sync(
    spec: JobSpec,
    *,
    root: Path,
    client: redis.Redis | None,
    job_id: int,
    template_dir: Path,
    instance_id: str | None = None,
    epoch: int = 0,
    device: str = "cpu",
    team_id: int = 0,
) -> WeightTransport:
    """The job's transport: the trainer's end (`instance_id` None) or that generation instance's end. With an
    artifact store (STREAMRL_ARTIFACTS) the shared-store versions go through it under the team's prefix; `root`
    is then this host's copy."""
    # root: <artifact dir>/jobs/<id>/weights; one process that publishes and loads (colocated, train-local) needs
    # no store for its weights
    one_process = client is None or spec.mode == "colocated"
    artifacts = None if one_process else artifact_store(root.parent.parent.parent)
    prefix = weights_prefix(team_id, job_id)
    choice = spec.training.weight_sync
    # a shared generation instance or training process holds several jobs: their adapters go through the store
    if choice == "shared_store" or client is None or spec.mode == "colocated" or spec.shares_generation \
            or spec.shares_training:
        return SharedStoreTransport(root, client, job_id, template_dir=template_dir, lora_spec=spec.training.lora,
                                    store=artifacts, store_prefix=prefix)
    if instance_id is None:
        store = (
            SharedStoreTransport(root, client=None, job_id=job_id, template_dir=template_dir,
                                 lora_spec=spec.training.lora, store=artifacts, store_prefix=prefix)
            if choice == "auto"
            else None
        )
        return P2PPublisher(client, job_id, epoch=epoch, device=device, store=store)
    fallback = (
        SharedStoreTransport(root, client=None, job_id=job_id, template_dir=template_dir, follow_disk=True,
                             store=artifacts, store_prefix=prefix)
        if choice == "auto"
        else None
    )
    return P2PReceiver(client, job_id, instance_id, device=device, fallback=fallback)


__all__ = ["P2PPublisher", "P2PReceiver", "SharedStoreTransport", "SyncTiming", "WeightTransport", "setup_weight_sync"]
