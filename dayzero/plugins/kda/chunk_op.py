"""`torch.ops.dayzero.chunk_kda`: varlen chunked KDA / gated DeltaNet prefill (Triton on CUDA, the reference on
CPU)."""

from __future__ import annotations

import torch

from dayzero.plugins.kda import reference
from dayzero.plugins.registry import plugin_op


def _cpu(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, scale: float,
         initial_state: torch.Tensor | None, cu_seqlens: torch.Tensor, use_qk_l2norm: bool,
         output_final_state: bool) -> tuple[torch.Tensor, torch.Tensor]:
    o, final = reference.chunk_kda(q[None], k[None], v[None], g[None], beta[None], scale, initial_state, True,
                                   use_qk_l2norm, cu_seqlens)
    return o[0], final if output_final_state else final.new_empty(0)


def _fake(q, k, v, g, beta, scale, initial_state, cu_seqlens, use_qk_l2norm, output_final_state):
    num_seqs = cu_seqlens.shape[0] - 1
    final_shape = (num_seqs, v.shape[1], k.shape[2], v.shape[2]) if output_final_state else (0,)
    return torch.empty_like(v), v.new_empty(final_shape, dtype=torch.float32)


@plugin_op("chunk_kda", cpu=_cpu, fake=_fake)
def chunk_kda_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                 scale: float, initial_state: torch.Tensor | None, cu_seqlens: torch.Tensor, use_qk_l2norm: bool,
                 output_final_state: bool) -> tuple[torch.Tensor, torch.Tensor]:
    from torch.library import wrap_triton

    from dayzero.plugins.kda.chunk_kernel import chunk_kda_launcher

    o, final = chunk_kda_launcher(q, k, v, g, beta, scale, initial_state, cu_seqlens, use_qk_l2norm,
                                  output_final_state, launch=wrap_triton)
    return o, final if final is not None else v.new_empty(0, dtype=torch.float32)


def chunk_kda(
    q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
    use_qk_l2norm_in_kernel=False, cu_seqlens=None, chunk_size: int = 64,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The reference contract ([B, T, H, K] inputs, optional varlen; g per channel or per head, q and k on the key
    heads) on the registered op."""
    batch, length, _, dim = k.shape
    if cu_seqlens is None:
        cu_seqlens = torch.arange(0, (batch + 1) * length, length, device=k.device)
    elif batch != 1:
        raise ValueError(f"varlen inputs (cu_seqlens) need batch size 1, got {batch}")
    flat = [x.reshape(batch * length, *x.shape[2:]).contiguous() for x in (q, k, v)]
    o, final = chunk_kda_op(
        *flat, g.reshape(batch * length, *g.shape[2:]).float().contiguous(),
        beta.reshape(batch * length, -1).contiguous(), dim ** -0.5 if scale is None else float(scale),
        initial_state, cu_seqlens.to(device=k.device, dtype=torch.int32), use_qk_l2norm_in_kernel,
        output_final_state,
    )
    return o.view(batch, length, *v.shape[2:]), (final if output_final_state else None)
