"""`torch.ops.dayzero.kda_summary`: the affine summary (M, B) of each sequence for context-parallel prefill.

A segment maps its entry state affinely, S_out = M S_in + B (docs/models.md), so both halves are final states
of the chunked kernel over the segment's k, g, beta: B from v and the zero state, M from v = 0 and the identity
state. On CUDA one launch does both, on v' = [0 | v] from the state [I | 0], whose final state is [M | B]; where
K + V is not a width the chunk kernel takes, two launches. q only feeds the outputs, which are dropped, so k
stands in for it. `compose` / `fold` stay plain torch matmuls (K x K by K x (K+V) per head): they export as
MatMul / Add and need no plugin node.
"""

from __future__ import annotations

import torch

from dayzero.plugins.kda import reference
from dayzero.plugins.registry import onnx_translation, plugin_op
from dayzero.plugins.short_conv.op import onnx_custom_node

# state widths the chunk kernel's launcher accepts
_CHUNK_WIDTHS = (16, 32, 64, 128, 256)


def _cpu(k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, cu_seqlens: torch.Tensor,
         use_qk_l2norm: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return reference.kda_summary(k[None], v[None], g[None], beta[None], use_qk_l2norm, cu_seqlens)


def _fake(k, v, g, beta, cu_seqlens, use_qk_l2norm):
    num_seqs, dim_k, (heads, dim_v) = cu_seqlens.shape[0] - 1, k.shape[2], v.shape[1:]
    return (k.new_empty(num_seqs, heads, dim_k, dim_k, dtype=torch.float32),
            k.new_empty(num_seqs, heads, dim_k, dim_v, dtype=torch.float32))


def _identity_states(num_seqs: int, heads: int, dim_k: int, width: int, device) -> torch.Tensor:
    """[N, H, K, width] fp32 with the identity in the first K columns, zeros after."""
    states = torch.zeros(num_seqs, heads, dim_k, width, device=device, dtype=torch.float32)
    states[..., :dim_k] = torch.eye(dim_k, device=device)
    return states


def kda_summary_launcher(
    k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, cu_seqlens: torch.Tensor,
    use_qk_l2norm: bool, launch=None, final_out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunk kernel's launches for k [T, Hk, K], v [T, H, V], g [T, H, K] or [T, H] fp32, beta [T, H],
    cu_seqlens [N+1] int32 -> (M [N, H, K, K], B [N, H, K, V]) fp32, contiguous; `final_out` [N, H, K, K+V] fp32,
    when given, receives [M | B] (the one-launch path writes it directly)."""
    from dayzero.plugins.kda.chunk_kernel import chunk_kda_launcher

    num_seqs, (T, _, dim_k), (heads, dim_v) = cu_seqlens.shape[0] - 1, k.shape, v.shape[1:]
    if dim_k + dim_v in _CHUNK_WIDTHS:
        stacked = torch.cat([v.new_zeros(T, heads, dim_k), v], dim=-1)  # [T, H, K + V]
        initial = _identity_states(num_seqs, heads, dim_k, dim_k + dim_v, k.device)
        _, final = chunk_kda_launcher(k, k, stacked, g, beta, 1.0, initial, cu_seqlens, use_qk_l2norm, True,
                                      launch=launch, final_out=final_out)
        return final[..., :dim_k].contiguous(), final[..., dim_k:].contiguous()
    initial = _identity_states(num_seqs, heads, dim_k, dim_k, k.device)
    _, M = chunk_kda_launcher(k, k, v.new_zeros(T, heads, dim_k), g, beta, 1.0, initial, cu_seqlens,
                              use_qk_l2norm, True, launch=launch)
    _, B = chunk_kda_launcher(k, k, v, g, beta, 1.0, None, cu_seqlens, use_qk_l2norm, True, launch=launch)
    if final_out is not None:
        final_out.copy_(torch.cat([M, B], dim=-1))
    return M, B


@plugin_op("kda_summary", cpu=_cpu, fake=_fake)
def kda_summary_op(k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, cu_seqlens: torch.Tensor,
                   use_qk_l2norm: bool) -> tuple[torch.Tensor, torch.Tensor]:
    from torch.library import wrap_triton

    return kda_summary_launcher(k, v, g, beta, cu_seqlens, use_qk_l2norm, launch=wrap_triton)


@onnx_translation(kda_summary_op)
def kda_summary_onnx(k, v, g, beta, cu_seqlens, use_qk_l2norm: bool):
    """One `dayzero::kda_summary` node: outputs (M [N,H,K,K], B [N,H,K,V]), both fp32."""
    node = onnx_custom_node("kda_summary", ["k", "v", "g", "beta", "cu_seqlens"], ["M", "B"],
                            {"use_qk_l2norm": "int"})
    return node(k, v, g, beta, cu_seqlens, use_qk_l2norm=int(use_qk_l2norm))


def kda_summary(
    k, v, g, beta, use_qk_l2norm_in_kernel=False, cu_seqlens=None, chunk_size: int = 64,
) -> reference.Summary:
    """`reference.kda_summary`'s contract ([B, T, H, K] inputs, optional varlen) on the registered op; the
    kernel's chunk is 64 whatever `chunk_size` says (the summary is exact for any chunk, only rounding differs)."""
    batch, length = k.shape[:2]
    if cu_seqlens is None:
        cu_seqlens = torch.arange(0, (batch + 1) * length, length, device=k.device)
    elif batch != 1:
        raise ValueError(f"varlen inputs (cu_seqlens) need batch size 1, got {batch}")
    k, v = (x.reshape(batch * length, *x.shape[2:]).contiguous() for x in (k, v))
    return kda_summary_op(k, v, g.reshape(batch * length, *g.shape[2:]).float().contiguous(),
                          beta.reshape(batch * length, -1).contiguous(),
                          cu_seqlens.to(device=k.device, dtype=torch.int32), bool(use_qk_l2norm_in_kernel))
