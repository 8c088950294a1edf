"""The interpreter's out-of-bounds checks (tests/interpreter_bounds.py) catch what they are for."""

from __future__ import annotations

import pytest
import torch

from tests.interpreter_bounds import OutOfBounds
from tests.plugins.triton_env import ON_GPU, needs_triton

pytestmark = [needs_triton, pytest.mark.skipif(ON_GPU, reason="checks the interpreter, which runs without a GPU")]


def _caught():
    # the interpreter re-raises a kernel's error as its own InterpreterError, with the message kept
    from triton.runtime.errors import InterpreterError

    return (OutOfBounds, InterpreterError)


def _copy_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def copy(src, dst, n, shift, BLOCK: tl.constexpr, MASKED: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        ok = offs < n if MASKED else offs < BLOCK
        tl.store(dst + offs, tl.load(src + offs + shift, mask=ok, other=0.0), mask=ok)

    return copy


def test_lanes_inside_the_tensors_pass():
    src, dst = torch.randn(10), torch.full((16,), float("nan"))
    _copy_kernel()[(1,)](src, dst, 10, 0, BLOCK=16, MASKED=True)
    assert torch.equal(dst[:10], src)


def test_a_load_past_the_end_is_caught():
    src, dst = torch.randn(10), torch.zeros(16)
    with pytest.raises(_caught(), match=r"copy: load of 6 lane\(s\).*past the end"):
        _copy_kernel()[(1,)](src, dst, 10, 0, BLOCK=16, MASKED=False)


def test_a_load_before_the_start_is_caught():
    src, dst = torch.randn(16), torch.zeros(16)
    with pytest.raises(_caught(), match="before argument storage"):
        _copy_kernel()[(1,)](src[4:], dst, 12, -8, BLOCK=16, MASKED=True)


def test_a_view_may_reach_the_rest_of_its_storage():
    # a slice's kernel may address its whole storage (the launcher passes views of larger buffers)
    base, dst = torch.randn(32), torch.zeros(16)
    _copy_kernel()[(1,)](base[:8], dst, 16, 0, BLOCK=16, MASKED=True)
    assert torch.equal(dst, base[:16])


def test_a_store_past_the_end_is_caught():
    src, dst = torch.randn(16), torch.zeros(12)
    with pytest.raises(_caught(), match=r"copy: store of 4 lane\(s\)"):
        _copy_kernel()[(1,)](src, dst, 16, 0, BLOCK=16, MASKED=True)
