"""Rotary position embedding (docs/models.md, "RoPE"): on the MLA's rope part (unless NoPE) and on the first dims of
the DSA indexer's query and key; halves rotated together (rotate-half) or DeepSeek's interleaved pairs; plain or
YaRN frequencies."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from dayzero.model.layer_config import YarnScaling


def _yarn_frequencies(dim: int, theta: float, s: YarnScaling, device) -> torch.Tensor:
    """YaRN: interpolated (divided by `factor`) for the slow dims, kept for the fast ones, a linear ramp between."""
    def correction_dim(rotations: float) -> float:
        return dim * math.log(s.original_max_position_embeddings / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction_dim(s.beta_fast), correction_dim(s.beta_slow)
    if s.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    ramp = torch.arange(dim // 2, dtype=torch.float32, device=device) - low
    ramp = (ramp / (high - low if high > low else 0.001)).clamp(0, 1)
    base = theta ** (torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim)
    return (1 / (s.factor * base)) * ramp + (1 / base) * (1 - ramp)


def rope_frequencies(dim: int, theta: float, scaling: YarnScaling | None = None, device=None) -> torch.Tensor:
    """Inverse frequencies [dim / 2] fp32 of a `dim`-wide rotary part."""
    if scaling is not None:
        return _yarn_frequencies(dim, theta, scaling, device)
    return 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim)


@dataclass(frozen=True)
class Rope:
    """Rotation of the last `dim` wide axis. `interleaved`: pairs (x0, x1), (x2, x3), ... turn together and the result
    is laid out [rotated evens | rotated odds], a fixed permutation of the dims that queries and keys share, so their
    dot products are those of the rotation in place (as DeepSeek's reference computes them)."""

    dim: int
    theta: float
    interleaved: bool = False
    scaling: YarnScaling | None = None

    def __call__(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x [T, ..., dim] rotated by positions [T] (fp32 math, x's dtype out)."""
        half = self.dim // 2
        inv_freq = rope_frequencies(self.dim, self.theta, self.scaling, x.device)
        angles = positions.float()[:, None] * inv_freq[None, :]  # [T, dim/2]
        shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (half,)
        factor = 1.0 if self.scaling is None else self.scaling.cos_sin_factor
        cos, sin = (angles.cos() * factor).view(shape), (angles.sin() * factor).view(shape)
        y = x.float()
        y1, y2 = (y[..., 0::2], y[..., 1::2]) if self.interleaved else (y[..., :half], y[..., half:])
        return torch.cat([y1 * cos - y2 * sin, y2 * cos + y1 * sin], dim=-1).to(x.dtype)

