import os

import torch

# Triton kernels run under the interpreter on machines without a GPU; the flag must be set before any kernel
# module is imported (triton.jit reads it at decoration time)
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from tests import interpreter_bounds  # noqa: E402

# every interpreted kernel's loads and stores must stay inside its tensor arguments (interpreter_bounds.py): a lane
# past the end would read or corrupt the heap silently, and a corrupted heap crashes tests later, elsewhere
if os.environ.get("TRITON_INTERPRET") == "1":
    interpreter_bounds.install()

# each pytest-xdist worker's torch would take every core for its CPU-side work: 8-12 workers on the H200 machine's
# 16 cores ran 24 GPU tests in 348 s; one thread a worker ran 43 in 50 s
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
