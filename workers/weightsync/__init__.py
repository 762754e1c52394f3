"""Weight transports from the trainer to generation instances: shared store and torch.distributed broadcast."""

from workers.weightsync.base import SyncTiming, WeightTransport
from workers.weightsync.broadcast import BroadcastTransport
from workers.weightsync.shared_store import SharedStoreTransport

__all__ = ["BroadcastTransport", "SharedStoreTransport", "SyncTiming", "WeightTransport"]
