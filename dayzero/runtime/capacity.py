"""How many cache pages and state slots a memory budget buys, from the engine manifest alone."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dayzero.contract import PAGE, SLOT, EngineManifest
from dayzero.errors import DayzeroError


@dataclass(frozen=True)
class Capacity:
    num_pages: int
    num_slots: int
    page_size: int
    slots_per_seq: int
    budget_bytes: int
    snapshot_groups: int = 0  # slot groups beyond the sequences', for the prefix cache's state snapshots

    @property
    def tokens(self) -> int:
        """Tokens of latent / index cache (the dummy page excluded)."""
        return (self.num_pages - 1) * self.page_size

    @property
    def sequences(self) -> int:
        """Concurrent sequences of KDA state (the dummy slot group and the snapshots' excluded)."""
        return self.num_slots // self.slots_per_seq - 1 - self.snapshot_groups

    def describe(self) -> str:
        snapshots = f" (+ {self.snapshot_groups} prefix snapshots)" if self.snapshot_groups else ""
        return (f"cache capacity: {self.tokens} tokens of latent/index cache ({self.num_pages} pages), "
                f"{self.sequences} concurrent sequences of KDA state{snapshots}, in {self.budget_bytes / 2**20:.0f} "
                "MiB")


def memory_budget(device: str, gpu_memory_fraction: float, budget_bytes: int | None) -> int:
    if budget_bytes is not None:
        return budget_bytes
    if torch.device(device).type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * gpu_memory_fraction)
    return 256 << 20


def plan_capacity(manifest: EngineManifest, budget: int, max_batch: int, snapshot_groups: int = 0) -> Capacity:
    """Slots for max_batch sequences (+ the dummy, + the prefix cache's snapshot groups) first, the rest of the
    budget in pages."""
    slots_per_seq = 1 + manifest.num_draft
    num_slots = (max_batch + 1 + snapshot_groups) * slots_per_seq
    slot_bytes, page_bytes = manifest.unit_bytes(SLOT), manifest.unit_bytes(PAGE)
    left = budget - num_slots * slot_bytes
    num_pages = left // page_bytes if page_bytes else _costless_pages(manifest, max_batch + snapshot_groups)
    if num_pages < 2 or left < 0:
        snapshots = f" and {snapshot_groups} prefix snapshots" if snapshot_groups else ""
        raise DayzeroError(f"a budget of {budget / 2**20:.1f} MiB holds the state of {max_batch} sequences"
                           f"{snapshots} ({num_slots * slot_bytes / 2**20:.1f} MiB) but no cache pages; give more "
                           "memory (--gpu-memory-fraction / --memory-mb) or a smaller --batch")
    return Capacity(int(num_pages), num_slots, manifest.page_size, slots_per_seq, budget, snapshot_groups)


def _costless_pages(manifest: EngineManifest, sequences: int) -> int:
    """A model without paged caches (every layer recurrent) still keeps page tables; its pages hold no bytes, so
    every sequence gets its longest length's worth (+ the dummy)."""
    return sequences * -(-manifest.max_len // manifest.page_size) + 1
