"""The router GEMM in fp32 precision on bf16 tensor cores: logits [T, E] = x [T, D] @ w [E, D]^T, fp32 out.

A bf16 x times a bf16 piece of w is exact in fp32, so an fp32 router weight is split (in registers, per tile)
into three bf16 pieces hi + mid + lo that hold all 24 bits of its significand; three bf16 dots with fp32
accumulation then give the fp32 GEMM's result up to summation order, at tensor-core speed instead of the fp32
GEMM's (`F.linear(x.float(), w.float())`, what the reference computes). A bf16 weight needs one dot.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from dayzero.plugins import device as device_info


@triton.jit
def _dot(a, b, acc, UPCAST: tl.constexpr):
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    return tl.dot(a, b, acc)


@triton.jit
def _router_logits_kernel(x, w, logits, T, E, D, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr,
                          BLOCK_D: tl.constexpr, SPLIT: tl.constexpr, UPCAST: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.program_id(1) * BLOCK_E + tl.arange(0, BLOCK_E)
    ks = tl.arange(0, BLOCK_D)
    x_ptrs = x + rows.to(tl.int64)[:, None] * D + ks[None, :]
    # [BLOCK_D, BLOCK_E] tile of w^T
    w_ptrs = w + cols.to(tl.int64)[None, :] * D + ks[:, None]
    acc = tl.zeros([BLOCK_T, BLOCK_E], tl.float32)
    for k0 in range(0, D, BLOCK_D):
        k_mask = ks + k0 < D
        a = tl.load(x_ptrs + k0, mask=(rows < T)[:, None] & k_mask[None, :], other=0.0)
        b = tl.load(w_ptrs + k0, mask=k_mask[:, None] & (cols < E)[None, :], other=0.0)
        if SPLIT:
            hi = b.to(tl.bfloat16)
            rest = b - hi.to(tl.float32)
            mid = rest.to(tl.bfloat16)
            lo = (rest - mid.to(tl.float32)).to(tl.bfloat16)
            # smallest piece first, so the small terms are not absorbed before the large ones arrive
            acc = _dot(a, lo, acc, UPCAST)
            acc = _dot(a, mid, acc, UPCAST)
            acc = _dot(a, hi, acc, UPCAST)
        else:
            acc = _dot(a, b, acc, UPCAST)
    out_mask = (rows < T)[:, None] & (cols < E)[None, :]
    tl.store(logits + rows.to(tl.int64)[:, None] * E + cols[None, :], acc, mask=out_mask)


def _config(device: torch.device) -> dict:
    if not device_info.on_gpu(device):
        return dict(BLOCK_T=16, BLOCK_E=16, BLOCK_D=16, num_warps=4, num_stages=1)
    return dict(BLOCK_T=128, BLOCK_E=128, BLOCK_D=64, num_warps=8, num_stages=3)


def router_logits_launcher(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None,
                           launch=None) -> torch.Tensor:
    """x [T, D] bf16, weight [E, D] fp32 or bf16 (both contiguous) -> logits [T, E] fp32 (into `out` if given)."""
    assert x.dim() == 2 and weight.dim() == 2 and x.shape[1] == weight.shape[1], f"x {x.shape} vs w {weight.shape}"
    assert x.dtype == torch.bfloat16 and weight.dtype in (torch.float32, torch.bfloat16), "x bf16, w fp32 or bf16"
    assert x.is_contiguous() and weight.is_contiguous()
    (tokens, dim), experts = x.shape, weight.shape[0]
    logits = torch.empty(tokens, experts, dtype=torch.float32, device=x.device) if out is None else out
    assert logits.shape == (tokens, experts) and logits.dtype == torch.float32 and logits.is_contiguous()
    if tokens == 0:
        return logits
    cfg = _config(x.device)
    kernel = launch(_router_logits_kernel) if launch else _router_logits_kernel
    kernel[(triton.cdiv(tokens, cfg["BLOCK_T"]), triton.cdiv(experts, cfg["BLOCK_E"]))](
        x, weight, logits, tokens, experts, dim, cfg["BLOCK_T"], cfg["BLOCK_E"], cfg["BLOCK_D"],
        weight.dtype == torch.float32,
        # the interpreter's bf16 dot is wrong (triton 3.9); it multiplies the (exact) bf16 values in fp32 instead
        not device_info.on_gpu(x.device),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return logits
