"""The model's per-layer caches (views of the engine's flat cache list) and step metadata for sequences laid out
contiguously (docs/architecture.md, "The engine contract").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.utils._pytree as pytree

from dayzero.contract import StepMeta
from dayzero.plugins.paged_cache.reference import PAGE_SIZE


@dataclass
class MLACache:
    latent_kv: torch.Tensor  # [P, PAGE_SIZE, kv_lora_rank + rope_dim]
    index_k: torch.Tensor | None  # [P, PAGE_SIZE, index_head_dim] when the layer has a DSA indexer
    # pooled index keys (kpool > 1): index_k holds a key a pool ([P, ceil(PAGE_SIZE / kpool), index_head_dim]) and
    # this [S, kpool - 1, 2 * index_head_dim] slotted window each sequence's rows of its unfinished pool
    index_window: torch.Tensor | None = None


@dataclass
class KDACache:
    """A recurrent layer's slots: KDA, or gated DeltaNet (H value heads; one conv group of its q, k, v side by side,
    conv [S, 1, W-1, 2*Hk*K + H*V])."""

    state: torch.Tensor  # [S, H, K, V] fp32
    conv: torch.Tensor  # [S, 3, W-1, H*K] pre-conv rows of q, k, v


@dataclass
class GQACache:
    kv: torch.Tensor  # [P, 2, Hkv, PAGE_SIZE, D], or FP8 uint8 [P, 2, Hkv, PAGE_SIZE * (D + 1)] (plugins/gqa)


for _cls in (MLACache, KDACache, GQACache):
    pytree.register_dataclass(_cls)


def contiguous_meta(
    context_lens: list[int], new_lens: list[int], pages_per_seq: int, slots_per_seq: int = 1,
    decode: bool = False, device=None,
) -> StepMeta:
    """Metadata for sequences laid out contiguously: sequence n owns pages [n*pages_per_seq, ...) and state slots
    [n*slots_per_seq, ...). A decode step (all new_lens equal to L <= slots_per_seq) writes token t's state to the
    sequence's t-th slot; a prefill step writes the final state to its first slot.

    Used by the eager reference paths (full-sequence logits, tests, `dayzero run`); the runtime's block manager
    and state pool build real tables.
    """
    n = len(new_lens)
    positions = torch.cat([torch.arange(c, c + q) for c, q in zip(context_lens, new_lens)])
    seq_of_token = torch.repeat_interleave(torch.arange(n), torch.tensor(new_lens))
    block_table = torch.arange(n * pages_per_seq, dtype=torch.int32).view(n, pages_per_seq)
    pages = block_table[seq_of_token, positions // PAGE_SIZE].long()
    width = new_lens[0] if decode else 1
    first_slot = torch.arange(n, dtype=torch.int32)[:, None] * slots_per_seq
    meta = StepMeta(
        positions=positions,
        cu_seqlens=torch.tensor([0, *new_lens]).cumsum(0).to(torch.int32),
        block_table=block_table,
        slot_mapping=pages * PAGE_SIZE + positions % PAGE_SIZE,
        state_slots=first_slot + torch.arange(width, dtype=torch.int32)[None, :],
        num_accepted=torch.ones(n, dtype=torch.int32),
    )
    return meta if device is None else pytree.tree_map(lambda t: t.to(device), meta)
