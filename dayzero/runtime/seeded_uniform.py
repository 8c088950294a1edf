"""Per-request random numbers as pure functions of (request seed, output position): a counter-based hash, so a
request's draws depend on nothing else in the batch (neither its neighbours nor its row) and replay exactly, also when
a preempted request is recomputed or a speculative step verifies the position.

The host computes them (a few integer operations a row) and sends the bits with the step's other inputs: as tensor
operations on the device the hash took ~40 tiny kernels a step."""

from __future__ import annotations

MASK32 = 0xFFFFFFFF
# Wellons' lowbias32 (hash-prospector)
MULTIPLIERS = (0x21F0AAAD, 0x735A2D97)
# added before hashing: the hash maps 0 to 0, and seed 0 at position 0 must not draw the smallest uniform
OFFSETS = (0x9E3779B9, 0x85EBCA6B, 0xC2B2AE35)
# 32 random bits b stand for the uniform (b + 0.5) / 2^32, strictly inside (0, 1)
BITS = 32


def mix32(x: int) -> int:
    """A value in [0, 2^32) -> its hash, a bijection of [0, 2^32)."""
    x ^= x >> 16
    x = (x * MULTIPLIERS[0]) & MASK32
    x ^= x >> 15
    x = (x * MULTIPLIERS[1]) & MASK32
    return x ^ (x >> 15)


def seed_words(seed: int) -> tuple[int, int]:
    """Any Python int (negative ones too) -> the low and high 32-bit words of its low 64 bits."""
    bits = seed & (2**64 - 1)
    return bits & MASK32, bits >> 32


def uniform_bits(seed: int, position: int) -> int:
    """The 32 random bits of (seed, position)."""
    low, high = seed_words(seed)
    key = mix32((mix32((low + OFFSETS[0]) & MASK32) ^ high) + OFFSETS[1] & MASK32)
    return mix32(key ^ mix32((position + OFFSETS[2]) & MASK32))


def uniform_of_bits(bits):
    """32 random bits (an int, or a float64 tensor of them) -> the uniform in (0, 1) they stand for."""
    return (bits + 0.5) / 2**BITS


def seeded_uniform(seed: int, position: int) -> float:
    """The uniform in (0, 1) of (seed, position)."""
    return uniform_of_bits(uniform_bits(seed, position))
