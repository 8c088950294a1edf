"""Operations on the state slots of an engine's caches: zeroing a sequence's slots and copying a snapshot.

A pool records them in order as `SlotOp`s, so that the other ranks of a multi-rank engine do the same to theirs.
"""

from __future__ import annotations

import torch

# (ZERO, first slot, count) or (COPY, source slot, target slot)
ZERO, COPY = 0, 1
SlotOp = tuple[int, int, int]


def zero_slots(tensors: list[torch.Tensor], start: int, count: int) -> None:
    """Slots start .. start + count - 1 of every slot-indexed cache hold an empty sequence's state."""
    for tensor in tensors:
        tensor[start : start + count].zero_()


def copy_slot(tensors: list[torch.Tensor], source: int, target: int) -> None:
    """Slot `target` of every slot-indexed cache takes slot `source`'s state (a prefix cache's snapshot)."""
    for tensor in tensors:
        tensor[target].copy_(tensor[source])


def apply_slot_op(tensors: list[torch.Tensor], op: SlotOp) -> None:
    kind, a, b = op
    if kind == ZERO:
        zero_slots(tensors, a, b)
    else:
        copy_slot(tensors, a, b)
