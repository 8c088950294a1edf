"""How far dayzero may be from transformers, by dtype.

fp32: 1e-4 relative, everywhere (the two compute the same math in a different order; what differs beyond that is a
bug). bf16 / fp16: both sides round every layer's output, so the two runs differ by about the rounding noise of
either. That noise is measured, not guessed: transformers runs the same sequences once more in fp32, and each
comparison may differ by NOISE_MULTIPLE times transformers' own distance from that fp32 run at the same place,
and never less than one rounding step of the dtype.
"""

from __future__ import annotations

import torch

FP32_TOLERANCE = 1e-4
# two independent roundings differ by about sqrt(2) x either one's noise; the rest is room for a different order
# of operations (dayzero's fused kernels accumulate in fp32 where transformers may round in between)
NOISE_MULTIPLE = 4.0


def needs_noise(dtype: torch.dtype, override: float | None) -> bool:
    """Whether the tolerance needs transformers' fp32 run (a reduced precision and no --tolerance)."""
    return override is None and dtype != torch.float32


def allowed(dtype: torch.dtype, noise: float | None, override: float | None) -> float:
    """The relative error a comparison may reach; noise: transformers in `dtype` vs in fp32, at the same place."""
    if override is not None:
        return override
    if dtype == torch.float32:
        return FP32_TOLERANCE
    return max(NOISE_MULTIPLE * noise, torch.finfo(dtype).eps)
