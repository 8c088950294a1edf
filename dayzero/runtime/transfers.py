"""A step's small host values go to the device in one copy per dtype, and its results come back in one: every copy
is a launch, and a blocking host-to-device copy would wait for the step's model kernels (leaving the GPU idle while the
host queues the sampler's)."""

from __future__ import annotations

import torch


def upload(columns: dict[str, list], dtype: torch.dtype, device: torch.device) -> dict[str, torch.Tensor]:
    """Named lists -> named 1-D tensors on the device, all moved in one copy."""
    flat = torch.tensor([value for values in columns.values() for value in values], dtype=dtype)
    # pinned, the copy to a GPU need not wait for the kernels queued before it
    pinned = device.type == "cuda" and len(flat)
    flat = (flat.pin_memory() if pinned else flat).to(device, non_blocking=bool(pinned))
    return dict(zip(columns, flat.split([len(values) for values in columns.values()])))


def download(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Integer (values below 2^31) and float32 tensors on the device -> the same on the host (integers as int64),
    through one copy: float32 travels as its int32 bits."""
    words = [t.reshape(-1).view(torch.int32) if t.dtype == torch.float32 else t.reshape(-1).to(torch.int32)
             for t in tensors]
    host = torch.cat(words).cpu() if words else torch.zeros(0, dtype=torch.int32)
    parts = host.split([w.numel() for w in words])
    return [(part.view(torch.float32) if t.dtype == torch.float32 else part.long()).view(t.shape)
            for t, part in zip(tensors, parts)]
