"""Integer arithmetic of the host-side launch plans (plain Python, no Triton: plans are read without compiling)."""

from __future__ import annotations


def cdiv(a, b):
    """ceil(a / b); symbolic sizes stay symbolic."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(0, int(n) - 1).bit_length()
