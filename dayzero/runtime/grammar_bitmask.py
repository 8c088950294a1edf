"""Token masks of answers held to a grammar as packed bitmasks: int32 [rows, ceil(vocab / 32)], bit j of word w set
where token 32 w + j is allowed (xgrammar's layout), so a grammar engine that fills such rows hands them over as they
are."""

from __future__ import annotations

import torch

BITS = 32


def bitmask_width(vocab_size: int) -> int:
    return -(-vocab_size // BITS)


def pack_bitmask(allowed: torch.Tensor) -> torch.Tensor:
    """bool [rows, vocab] -> int32 [rows, ceil(vocab / 32)]."""
    rows, vocab = allowed.shape
    bits = torch.zeros(rows, bitmask_width(vocab) * BITS, dtype=torch.int64, device=allowed.device)
    bits[:, :vocab] = allowed
    words = (bits.view(rows, -1, BITS) << torch.arange(BITS, device=allowed.device)).sum(-1)
    # words above 2^31 - 1 are negative int32 (the same bits)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """int32 [rows, ceil(vocab / 32)] -> bool [rows, vocab]: the allowed tokens."""
    shifts = torch.arange(BITS, dtype=torch.int32, device=bitmask.device)
    bits = (bitmask[:, :, None] >> shifts) & 1
    return bits.view(bitmask.shape[0], -1)[:, :vocab_size].bool()
