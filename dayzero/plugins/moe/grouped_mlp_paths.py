"""The grouped expert MLP on a GPU: torch._grouped_mm (CUTLASS) on Hopper and newer for bf16 when the experts get
enough rows each, the Triton grouped GEMM (gate, up and activation fused) otherwise. MXFP4 experts always take the
Triton GEMM, which dequantizes the weight tiles it loads."""

from __future__ import annotations

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from dayzero.plugins import device as device_info
from dayzero.plugins.moe.activation_kernel import gated_activation_launcher
from dayzero.plugins.moe.grouped_gemm_kernel import grouped_gemm_launcher

# below this many rows per expert on average (decode), the layer streams expert weights and the Triton grouped
# GEMM is faster on the H200 (K3.1, 64 tokens: 9.3 vs 12.1 ms; Kimi-Linear: 0.76 vs 1.06 ms, bench/bench_moe.py)
MIN_ROWS_PER_EXPERT_FOR_GROUPED_MM = 32


def grouped_mm_available(x: torch.Tensor) -> bool:
    return (device_info.on_gpu(x.device) and x.dtype == torch.bfloat16 and hasattr(torch, "_grouped_mm")
            and device_info.gpu_capability(x.device) >= (9, 0))


def takes_grouped_mm(x: torch.Tensor, rows, num_experts: int) -> bool:
    """The Triton GEMM only where the rows are known to be few: a traced row count whose range allows many (an
    exported prefill) takes grouped_mm, without a guard that would narrow the engine's range."""
    few_rows = rows < MIN_ROWS_PER_EXPERT_FOR_GROUPED_MM * num_experts
    return grouped_mm_available(x) and not statically_known_true(few_rows)


def use_grouped_mm(x_sorted: torch.Tensor, num_experts: int) -> bool:
    return takes_grouped_mm(x_sorted, x_sorted.shape[0], num_experts)


def grouped_mlp_grouped_mm(
    x_sorted: torch.Tensor, expert_offsets: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor,
    activation: str, beta: float, linear_beta: float | None, launch=None,
) -> torch.Tensor:
    """x_sorted [M, D] bf16, expert_offsets [E+1] int32, w1/w3 [E, I, D], w2 [E, D, I] -> [M, D]."""
    # _grouped_mm takes cumulative group ends and b as [E, K, N]: the transposed nn.Linear weights are the
    # column-major operand its kernel wants, so no copy
    ends = expert_offsets[1:]
    gate = torch._grouped_mm(x_sorted, w1.transpose(1, 2), offs=ends)
    up = torch._grouped_mm(x_sorted, w3.transpose(1, 2), offs=ends)
    h = gated_activation_launcher(gate.contiguous(), up.contiguous(), activation, beta, linear_beta, launch=launch)
    return torch._grouped_mm(h, w2.transpose(1, 2), offs=ends)


def grouped_mlp_triton(
    x_sorted: torch.Tensor, expert_offsets: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor,
    activation: str, beta: float, linear_beta: float | None, out: torch.Tensor | None = None, launch=None,
) -> torch.Tensor:
    """Same contract as grouped_mlp_grouped_mm, any float dtype: two Triton grouped GEMMs (into `out`)."""
    h = grouped_gemm_launcher(x_sorted, w1, expert_offsets, w3, activation, beta, linear_beta, launch=launch)
    return grouped_gemm_launcher(h, w2, expert_offsets, out=out, launch=launch)


def grouped_mlp_shared_triton(
    x_sorted: torch.Tensor, expert_offsets: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor,
    shared_w1: torch.Tensor, shared_w3: torch.Tensor, shared_w2: torch.Tensor, activation: str, beta: float,
    linear_beta: float | None, launch=None,
) -> torch.Tensor:
    """grouped_mlp_triton with one more expert E, shared_w1/w3 [I, D] and shared_w2 [D, I] (expert_offsets [E+2]),
    read in place: the shared expert costs no launches of its own."""
    if x_sorted.shape[0] == 0:
        return torch.empty_like(x_sorted)
    h = grouped_gemm_launcher(x_sorted, w1, expert_offsets, w3, activation, beta, linear_beta, launch=launch,
                              b_extra=shared_w1.contiguous(), b_up_extra=shared_w3.contiguous())
    return grouped_gemm_launcher(h, w2, expert_offsets, launch=launch, b_extra=shared_w2.contiguous())


def grouped_mlp_cuda(
    x_sorted: torch.Tensor, expert_offsets: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor,
    activation: str, beta: float, linear_beta: float | None, launch=None,
) -> torch.Tensor:
    if x_sorted.shape[0] == 0:
        return torch.empty_like(x_sorted)
    impl = grouped_mlp_grouped_mm if use_grouped_mm(x_sorted, w1.shape[0]) else grouped_mlp_triton
    return impl(x_sorted, expert_offsets, w1, w3, w2, activation, beta, linear_beta, launch=launch)


def grouped_mlp_mxfp4_cuda(
    x_sorted: torch.Tensor, expert_offsets: torch.Tensor, w1: torch.Tensor, w1_scale: torch.Tensor, w3: torch.Tensor,
    w3_scale: torch.Tensor, w2: torch.Tensor, w2_scale: torch.Tensor, activation: str, beta: float,
    linear_beta: float | None, launch=None, out: torch.Tensor | None = None,
) -> torch.Tensor:
    """x_sorted [M, D] bf16 or fp32, expert_offsets [E+1] int32, MXFP4 experts: w1/w3 uint8 [E, I, D/2] with E8M0
    scales [E, I, D/32], w2 uint8 [E, D, I/2] with scales [E, D, I/32] -> [M, D] (into `out` if given).

    Two Triton grouped GEMMs that dequantize the weight tiles they load (torch._grouped_mm takes no MXFP4 weights),
    so decode streams 4.25 bits a weight instead of 16.
    """
    if x_sorted.shape[0] == 0:
        return torch.empty_like(x_sorted) if out is None else out
    h = grouped_gemm_launcher(x_sorted, w1, expert_offsets, w3, activation, beta, linear_beta, launch=launch,
                              b_scale=w1_scale, b_up_scale=w3_scale)
    return grouped_gemm_launcher(h, w2, expert_offsets, out=out, launch=launch, b_scale=w2_scale)
