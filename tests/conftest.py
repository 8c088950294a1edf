import os

import torch

# Triton kernels run under the interpreter on machines without a GPU; the flag must be set before any kernel
# module is imported (triton.jit reads it at decoration time)
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
