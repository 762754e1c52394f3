"""`MemoryRoom` (workers/runtime/shared_training.py): how many more drivers a shared training process's memory takes,
from the memory it grew by per driver and the free memory of its device."""

from __future__ import annotations

from workers.runtime.shared_training import MemoryRoom

MIB = 2**20


class Measured(MemoryRoom):
    def __init__(self, used: list[int], free: int) -> None:
        self._used, self._free = used, free  # `used` answers in turn: at the start, then at each reading
        super().__init__("cpu")

    def used(self) -> int:
        return self._used.pop(0)

    def free(self) -> int:
        return self._free


def test_room_is_free_memory_over_what_a_driver_cost_here() -> None:
    assert Measured([100 * MIB], free=1000 * MIB).room(0) is None  # no driver yet: nothing measured
    # the process grew by 200 MiB for 2 drivers (100 each); 80% of 1000 MiB free holds 8 more
    assert Measured([100 * MIB, 300 * MIB], free=1000 * MIB).room(2) == 8
    assert Measured([100 * MIB, 700 * MIB], free=500 * MIB).room(1) == 0  # a 600 MiB driver does not fit in 400


def test_room_on_this_host_reads_real_memory() -> None:
    room = MemoryRoom("cpu")
    assert room.free() > 0 and room.used() > 0
    spent = bytearray(64 * MIB)  # a driver's worth of memory, touched
    spent[:: 4096] = b"x" * len(spent[:: 4096])
    assert isinstance(room.room(1), int)
