"""Explicit inputs of one engine step (docs/architecture.md, "The engine contract").

Tokens of all sequences are flattened: sequence n owns new tokens [cu_seqlens[n], cu_seqlens[n+1]). A prefill
step has any number of new tokens per sequence (chunked prefill continues after cached context); a decode step has
the same L = 1 + num_draft tokens for every sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.utils._pytree as pytree


@dataclass
class StepMeta:
    positions: torch.Tensor  # [T] absolute position of each new token
    cu_seqlens: torch.Tensor  # [N+1] offsets of each sequence's new tokens
    block_table: torch.Tensor  # [N, max_pages] physical page of each logical page
    slot_mapping: torch.Tensor  # [T] flat cache row of each new token (-1: skip)
    state_slots: torch.Tensor  # [N, L] KDA state slot written after each token (prefill: L = 1)
    num_accepted: torch.Tensor  # [N] read the entry state from state_slots[n, num_accepted[n] - 1]


pytree.register_dataclass(StepMeta)

