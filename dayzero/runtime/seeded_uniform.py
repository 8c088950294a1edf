"""Per-request random numbers as pure functions of (request seed, output position): a counter-based hash, so a
request's draws depend on nothing else in the batch (neither its neighbours nor its row) and replay exactly, also when
a preempted request is recomputed or a speculative step verifies the position."""

from __future__ import annotations

import torch

MASK32 = 0xFFFFFFFF
# Wellons' lowbias32 (hash-prospector) with multipliers below 2^31: a 32-bit value times one stays below 2^63, so the
# int64 tensors never overflow (signed overflow is undefined in torch's kernels)
MULTIPLIERS = (0x21F0AAAD, 0x735A2D97)
# added before hashing: the hash maps 0 to 0, and seed 0 at position 0 must not draw the smallest uniform
OFFSETS = (0x9E3779B9, 0x85EBCA6B, 0xC2B2AE35)


def mix32(x: torch.Tensor) -> torch.Tensor:
    """int64 values in [0, 2^32) -> their hash, a bijection of [0, 2^32)."""
    x = x ^ (x >> 16)
    x = (x * MULTIPLIERS[0]) & MASK32
    x = x ^ (x >> 15)
    x = (x * MULTIPLIERS[1]) & MASK32
    return x ^ (x >> 15)


def seed_words(seed: int) -> tuple[int, int]:
    """Any Python int (negative ones too) -> the low and high 32-bit words of its low 64 bits."""
    bits = seed & (2**64 - 1)
    return bits & MASK32, bits >> 32


def seeded_uniform(seeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """seeds int64 [R, 2] (seed_words), positions int64 [R] -> float64 [R] uniform in (0, 1), one per (seed,
    position) pair, with 32 random bits."""
    key = mix32((mix32((seeds[:, 0] + OFFSETS[0]) & MASK32) ^ seeds[:, 1]) + OFFSETS[1] & MASK32)
    bits = mix32(key ^ mix32((positions + OFFSETS[2]) & MASK32))
    return (bits.double() + 0.5) / 2**32
