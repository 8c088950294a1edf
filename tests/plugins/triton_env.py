"""Where Triton kernel tests run: under the interpreter on a CPU-only machine (tiny shapes; conftest sets
TRITON_INTERPRET=1), natively on a GPU (`pytest -m gpu` runs the realistic sizes)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

HAS_TRITON = importlib.util.find_spec("triton") is not None
ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"

needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
gpu_only = [pytest.mark.gpu, pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")]


def sizes(cpu, gpu):
    """Parametrize over tiny shapes for the interpreter, realistic ones on the GPU."""
    return [pytest.param(*s, id="-".join(map(str, s))) for s in cpu] if not ON_GPU else [
        pytest.param(*s, id="-".join(map(str, s)), marks=pytest.mark.gpu) for s in gpu]


def poisoned(*shape, dtype=torch.float32, device=DEVICE) -> torch.Tensor:
    """An output buffer full of NaN (or the integer minimum), so unwritten elements fail the comparison."""
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.full(shape, torch.iinfo(dtype).min, dtype=dtype, device=device)
