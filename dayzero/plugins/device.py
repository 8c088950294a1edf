"""What the launch plans ask of the device they launch on.

Launch plans (grids, block sizes, buffer sizes) must hold for every size an exported engine will see: under
torch.export / AOTInductor the sizes are symbols, and a Python comparison on one (min, max, if) silently becomes an
assumption compiled into the engine (AOTInductor narrows the input's range to it, and a larger batch then reads out
of bounds). Plans therefore use torch.sym_min / sym_max on sizes, and ask the device questions only here, so that
tests can answer them for a GPU and check every plan on symbolic shapes without one
(tests/export/test_symbolic_launch_plans.py).
"""

from __future__ import annotations

import functools

import torch


def on_gpu(device: torch.device) -> bool:
    """Whether a launch on `device` is compiled for the GPU (else: the Triton interpreter on CPU, tiny test tiles)."""
    return device.type == "cuda"


def is_eager_cuda(tensor: torch.Tensor) -> bool:
    """A real CUDA tensor outside tracing: host-side choices on its values (or its GPU) are allowed; export and
    compile keep capturing the default Triton kernel."""
    return not torch.compiler.is_compiling() and type(tensor) is torch.Tensor and tensor.is_cuda


def gpu_capability(device: torch.device) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device)


def num_sms(device: torch.device, cpu_default: int) -> int:
    """Streaming multiprocessors of `device`; `cpu_default` under the interpreter."""
    if not on_gpu(device):
        return cpu_default
    return _properties(device).multi_processor_count


def shared_memory_per_program(device: torch.device) -> int | None:
    """Bytes of shared memory one program may use on `device` (the opt-in limit); None under the interpreter."""
    if not on_gpu(device):
        return None
    return _properties(device).shared_memory_per_block_optin


def _properties(device: torch.device):
    return _device_properties(device.index if device.index is not None else torch.cuda.current_device())


@functools.cache
def _device_properties(index: int):
    return torch.cuda.get_device_properties(index)
