"""Triton gated activations act(gate) * up (SwiGLU, SiTU, clamped SwiGLU): jit helpers for GEMM epilogues and an
elementwise kernel for the outputs of library GEMMs."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dayzero.plugins.output_buffer import output_like

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
def _gated_activation_kernel(gate, up, out, cols, col_blocks, gate_stride, up_stride, beta, linear_beta,
                             BLOCK: tl.constexpr, ACTIVATION: tl.constexpr, HAS_LINEAR_BETA: tl.constexpr):
    row = (tl.program_id(0) // col_blocks).to(tl.int64)
    offs = tl.program_id(0) % col_blocks * BLOCK + tl.arange(0, BLOCK)
    mask = offs < cols
    g = tl.load(gate + row * gate_stride + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(up + row * up_stride + offs, mask=mask, other=0.0).to(tl.float32)
    h = gated_act(g, u, beta, linear_beta, ACTIVATION, HAS_LINEAR_BETA)
    tl.store(out + row * cols + offs, h.to(out.dtype.element_ty), mask=mask)


def as_row_matrix(t: torch.Tensor) -> torch.Tensor:
    """t [..., I] as [R, I] rows with unit column stride: a view where the layout allows (the halves of a fused
    gate / up projection), else a copy."""
    if t.stride(-1) != 1:
        t = t.contiguous()
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        return t.contiguous().view(-1, t.shape[-1])


def gated_activation_launcher(
    gate: torch.Tensor, up: torch.Tensor, activation: str, beta: float = 1.0, linear_beta: float | None = None,
    out: torch.Tensor | None = None, launch=None,
) -> torch.Tensor:
    """act(gate) * up in fp32 -> gate's dtype, contiguous: gate, up [..., I], each row's I values contiguous (rows
    may be strided: the two halves of one [T, 2I] projection)."""
    assert gate.shape == up.shape, f"gate {tuple(gate.shape)} and up {tuple(up.shape)} differ"
    out = output_like(out, gate)
    cols = gate.shape[-1]
    if gate.numel() == 0:
        return out
    gate_rows, up_rows = as_row_matrix(gate), as_row_matrix(up)
    block = min(2048, triton.next_power_of_2(cols))
    col_blocks = triton.cdiv(cols, block)
    kernel = launch(_gated_activation_kernel) if launch else _gated_activation_kernel
    kernel[(gate_rows.shape[0] * col_blocks,)](
        gate_rows, up_rows, out, cols, col_blocks, gate_rows.stride(0), up_rows.stride(0), beta,
        1.0 if linear_beta is None else linear_beta, block, ACTIVATION_CODES[activation], linear_beta is not None,
        num_warps=4)
    return out
