"""Triton gated activations act(gate) * up (SwiGLU, SiTU, clamped SwiGLU): jit helpers for GEMM epilogues and an
elementwise kernel for the outputs of library GEMMs."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# activation codes (kernel constexprs), by the names of plugins.moe.activation.GATED_ACTIVATIONS
ACTIVATION_CODES = {"silu": 0, "situ": 1, "clamped_silu": 2}


@triton.jit
def _tanh(x):
    # libdevice tanh is missing from the interpreter; small |x| by its series, where 1 - e^-2|x| cancels
    t = tl.exp(-2.0 * tl.abs(x))
    far = (1.0 - t) / (1.0 + t)
    far = tl.where(x < 0, -far, far)
    x2 = x * x
    near = x * (1.0 - x2 * (1.0 / 3.0 - x2 * (2.0 / 15.0)))
    return tl.where(tl.abs(x) < 0.0625, near, far)


@triton.jit
def gated_act(gate, up, beta, linear_beta, ACTIVATION: tl.constexpr, HAS_LINEAR_BETA: tl.constexpr):
    """fp32 act(gate) * up: SwiGLU (ACTIVATION 0), SiTU beta * tanh(gate / beta) * sigmoid(gate) (1), or SwiGLU
    with gate <= beta and up in [-beta, beta] (2, beta the clamped SwiGLU's limit)."""
    if ACTIVATION == 1:
        h = beta * _tanh(gate / beta) * tl.sigmoid(gate)
        if HAS_LINEAR_BETA:
            up = linear_beta * _tanh(up / linear_beta)
    elif ACTIVATION == 2:
        gate = tl.minimum(gate, beta)
        up = tl.minimum(tl.maximum(up, -beta), beta)
        h = gate * tl.sigmoid(gate)
    else:
        h = gate * tl.sigmoid(gate)
    return h * up


@triton.jit
def _gated_activation_kernel(gate, up, out, n, beta, linear_beta, BLOCK: tl.constexpr, ACTIVATION: tl.constexpr,
                             HAS_LINEAR_BETA: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(gate + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up + offs, mask=mask, other=0.0).to(tl.float32)
    h = gated_act(g, u, beta, linear_beta, ACTIVATION, HAS_LINEAR_BETA)
    tl.store(out + offs, h.to(out.dtype.element_ty), mask=mask)


def gated_activation_launcher(
    gate: torch.Tensor, up: torch.Tensor, activation: str, beta: float = 1.0, linear_beta: float | None = None,
    out: torch.Tensor | None = None, launch=None,
) -> torch.Tensor:
    """act(gate) * up in fp32 -> gate's dtype: gate, up [..., I] contiguous."""
    assert gate.shape == up.shape and gate.is_contiguous() and up.is_contiguous(), "gate/up: same shape, contiguous"
    out = torch.empty_like(gate) if out is None else out
    assert out.shape == gate.shape and out.is_contiguous()
    n = gate.numel()
    if n == 0:
        return out
    block = 2048
    kernel = launch(_gated_activation_kernel) if launch else _gated_activation_kernel
    kernel[(triton.cdiv(n, block),)](gate, up, out, n, beta, 1.0 if linear_beta is None else linear_beta, block,
                                     ACTIVATION_CODES[activation], linear_beta is not None, num_warps=4)
    return out
