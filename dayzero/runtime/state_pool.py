"""KDA recurrent-state and short-conv slots: (1 + num_draft) consecutive slots per running sequence.

Slot group 0 is the dummy that padded rows write into. A sequence's slots are zeroed when it is admitted (a zero
state is the state of an empty sequence), through the manifest's list of slot-indexed cache tensors. Prefill reads
and writes the group's first slot; a verify step writes token t's state into slot t of the group and the next step
starts from slot `seq.num_accepted - 1`, so rolling back rejected drafts copies nothing.

Groups are handed out lowest first, so the running sequences' states stay packed at the pool's start: with the
decode rows in slot order (scheduler.py), a decode step then reads the pool front to back. On the H200 the KDA pool
step at B64 H32 reads a pool in order at 86% of copy, a random permutation of it at 83% (bench/README.md, run fd).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import torch

from dayzero.errors import DayzeroError
from dayzero.runtime.sequence import Sequence

DUMMY_GROUP = 0


def zero_slots(tensors: list[torch.Tensor], start: int, count: int) -> None:
    """Slots start .. start + count - 1 of every slot-indexed cache hold an empty sequence's state."""
    for tensor in tensors:
        tensor[start : start + count].zero_()


class StatePool:
    def __init__(self, num_slots: int, slots_per_seq: int, slot_tensors: list[torch.Tensor],
                 on_reset: Callable[[int, int], None] | None = None):
        self.slots_per_seq = slots_per_seq
        self.num_groups = num_slots // slots_per_seq
        if self.num_groups < 2:
            raise DayzeroError(f"{num_slots} KDA state slots hold no sequence (one group of {slots_per_seq} is the "
                               "dummy); give the runtime more memory")
        # a min-heap: the lowest free group goes first
        self.free_groups = list(range(DUMMY_GROUP + 1, self.num_groups))
        self.owner: dict[int, str] = {}
        self.slot_tensors = slot_tensors
        # told (first slot, count) of every zeroed group: the other ranks of a tensor-parallel engine zero theirs
        self.on_reset = on_reset

    @property
    def num_free(self) -> int:
        return len(self.free_groups)

    @property
    def capacity_sequences(self) -> int:
        return self.num_groups - 1

    def first_slot(self, group: int) -> int:
        return group * self.slots_per_seq

    def allocate(self, seq: Sequence) -> None:
        if not self.free_groups:
            raise DayzeroError(f"{seq.request_id}: no free KDA state slot")
        group = heapq.heappop(self.free_groups)
        self.owner[group] = seq.request_id
        seq.slot = group
        seq.num_accepted = 1
        start = self.first_slot(group)
        zero_slots(self.slot_tensors, start, self.slots_per_seq)
        if self.on_reset is not None:
            self.on_reset(start, self.slots_per_seq)

    def free(self, seq: Sequence) -> None:
        if seq.slot is not None:
            del self.owner[seq.slot]
            heapq.heappush(self.free_groups, seq.slot)
            seq.slot = None
