"""KDA recurrent-state and short-conv slots: (1 + num_draft) consecutive slots per running sequence.

Slot group 0 is the dummy that padded rows write into. A sequence's slots are zeroed when it is admitted (a zero
state is the state of an empty sequence), through the manifest's list of slot-indexed cache tensors. Prefill reads
and writes the group's first slot; a verify step writes token t's state into slot t of the group and the next step
starts from slot `seq.num_accepted - 1`, so rolling back rejected drafts copies nothing.

Groups are handed out lowest first, so the running sequences' states stay packed at the pool's start: with the
decode rows in slot order (scheduler.py), a decode step then reads the pool front to back. On the H200 the KDA pool
step at B64 H32 reads a pool in order at 86% of copy, a random permutation of it at 83% (bench/README.md, KDA decode).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import torch

from dayzero.contract import COPY, ZERO, SlotOp, apply_slot_op
from dayzero.errors import DayzeroError
from dayzero.runtime.sequence import Sequence

DUMMY_GROUP = 0


class StatePool:
    def __init__(self, num_slots: int, slots_per_seq: int, slot_tensors: list[torch.Tensor],
                 on_change: Callable[[SlotOp], None] | None = None):
        self.slots_per_seq = slots_per_seq
        self.num_groups = num_slots // slots_per_seq
        if self.num_groups < 2:
            raise DayzeroError(f"{num_slots} KDA state slots hold no sequence (one group of {slots_per_seq} is the "
                               "dummy); give the runtime more memory")
        # a min-heap: the lowest free group goes first
        self.free_groups = list(range(DUMMY_GROUP + 1, self.num_groups))
        self.owner: dict[int, str] = {}
        self.slot_tensors = slot_tensors
        # told every zeroing and copy: the other ranks of a multi-rank engine repeat them on their slots
        self.on_change = on_change
        # groups that hold a cached prefix's state (prefix_cache.py), and how to evict the least recently used one
        self.num_spare_held = 0
        self.evict: Callable[[], bool] = lambda: False

    @property
    def num_free(self) -> int:
        return len(self.free_groups)

    @property
    def num_available(self) -> int:
        """Free groups, and those that evicting every cached prefix would free."""
        return self.num_free + self.num_spare_held

    @property
    def capacity_sequences(self) -> int:
        return self.num_groups - 1

    def first_slot(self, group: int) -> int:
        return group * self.slots_per_seq

    def allocate(self, seq: Sequence, state_of: int | None = None) -> None:
        """Give `seq` a group whose first slot holds an empty sequence's state, or a copy of group `state_of`'s
        first slot (a cached prefix's snapshot)."""
        if not self._free_a_group():
            raise DayzeroError(f"{seq.request_id}: no free KDA state slot")
        group = heapq.heappop(self.free_groups)
        self.owner[group] = seq.request_id
        seq.slot = group
        seq.num_accepted = 1
        start = self.first_slot(group)
        # the eviction above may have freed group `state_of` itself (then its state is in place), or another
        # (then `state_of`'s state is intact until someone writes it: copied here, before anything does)
        keep = int(group == state_of)
        if self.slots_per_seq > keep:
            self._apply((ZERO, start + keep, self.slots_per_seq - keep))
        if state_of is not None and not keep:
            self._apply((COPY, self.first_slot(state_of), start))

    def take_spare(self, source_slot: int) -> int | None:
        """A group for a cached prefix (the highest free one, away from the running sequences' packed groups; the
        least recently used prefix's when none is free) holding a copy of slot `source_slot`; None when every group
        runs a sequence."""
        if not self._free_a_group():
            return None
        group = max(self.free_groups)
        self.free_groups.remove(group)
        heapq.heapify(self.free_groups)
        self.num_spare_held += 1
        self._apply((COPY, source_slot, self.first_slot(group)))
        return group

    def give_back(self, group: int) -> None:
        self.num_spare_held -= 1
        heapq.heappush(self.free_groups, group)

    def _free_a_group(self) -> bool:
        """Whether a group is free, after evicting cached prefixes (least recently used first) while none is."""
        while not self.free_groups and self.evict():
            pass
        return bool(self.free_groups)

    def _apply(self, op: SlotOp) -> None:
        apply_slot_op(self.slot_tensors, op)
        if self.on_change is not None:
            self.on_change(op)

    def free(self, seq: Sequence) -> None:
        if seq.slot is not None:
            del self.owner[seq.slot]
            heapq.heappush(self.free_groups, seq.slot)
            seq.slot = None
