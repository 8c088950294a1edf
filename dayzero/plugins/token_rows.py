"""How the decode kernels read the token rows of [B, L, ...] inputs that may be views of a fused projection's output
(no Triton here: the registered ops decide on these before launching)."""

from __future__ import annotations

import torch


def has_contiguous_tokens(x: torch.Tensor) -> bool:
    """Whether each token's trailing block of x [B, L, ...] is contiguous (B and L may be strided)."""
    expected = 1
    for size, stride in zip(reversed(x.shape[2:]), reversed(x.stride()[2:])):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def has_flat_token_rows(x: torch.Tensor) -> bool:
    """Whether x [B, L, ...] has each token's trailing block contiguous and its B * L tokens evenly strided (a view
    of a [T, N] projection output), as `flat_token_stride` needs."""
    evenly = x.shape[0] == 1 or x.shape[1] == 1 or x.stride(0) == x.shape[1] * x.stride(1)
    return evenly and has_contiguous_tokens(x)


def flat_token_stride(x: torch.Tensor) -> int:
    """Elements between consecutive tokens of x [B, L, ...] read as B * L rows (has_flat_token_rows holds)."""
    assert has_flat_token_rows(x), f"tokens of {tuple(x.shape)} (strides {x.stride()}) are not evenly strided rows"
    return x.stride(1) if x.shape[1] > 1 else x.stride(0) if x.shape[0] > 1 else x[0, 0].numel()
