"""The output tensor a kernel launcher writes: the caller's buffer, checked, or a new one."""

from __future__ import annotations

import torch


def output_buffer(given: torch.Tensor | None, shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """`given` where the caller passed one (it must be a contiguous `shape` tensor of `dtype`), else a new one."""
    if given is None:
        return torch.empty(shape, dtype=dtype, device=device)
    assert tuple(given.shape) == tuple(shape) and given.dtype == dtype and given.is_contiguous(), (
        f"output buffer {tuple(given.shape)} {given.dtype} is not a contiguous {tuple(shape)} {dtype}")
    return given


def output_like(given: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """output_buffer of `like`'s shape, dtype and device."""
    return output_buffer(given, like.shape, like.dtype, like.device)
