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


class Download:
    """Integer (values below 2^31) and float32 tensors on the device on their way to the host in one copy (float32
    travels as its int32 bits). From a GPU the copy goes into pinned memory behind the kernels queued so far, and
    `wait` waits for those alone: the host may queue the next step's kernels in between."""

    def __init__(self, tensors: list[torch.Tensor]):
        self.tensors = tensors
        words = [t.reshape(-1).view(torch.int32) if t.dtype == torch.float32 else t.reshape(-1).to(torch.int32)
                 for t in tensors]
        self.sizes = [w.numel() for w in words]
        flat = torch.cat(words) if words else torch.zeros(0, dtype=torch.int32)
        self.done: torch.cuda.Event | None = None
        if flat.is_cuda:
            self.host = torch.empty(flat.shape, dtype=torch.int32, pin_memory=True)
            self.host.copy_(flat, non_blocking=True)
            self.done = torch.cuda.Event()
            self.done.record()
        else:
            self.host = flat.cpu()

    def wait(self) -> list[torch.Tensor]:
        """The tensors on the host (integers as int64), once their copy has landed."""
        if self.done is not None:
            self.done.synchronize()
        parts = self.host.split(self.sizes)
        return [(part.view(torch.float32) if t.dtype == torch.float32 else part.long()).view(t.shape)
                for t, part in zip(self.tensors, parts)]


def download(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors on the host, now (Download, waited for)."""
    return Download(tensors).wait()
