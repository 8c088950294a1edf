"""`torch.ops.dayzero.{write_kv,gqa_prefill_paged,gqa_decode_paged}`: the paged K/V cache write and grouped-query
attention over it (reference.py, cache_layout.py).

write_kv mutates the cache in place; its ONNX node (WriteKv) returns the updated cache, the functional form in which
torch.export hands a mutating op on. The attention nodes (GqaPrefillPaged, GqaDecodePaged) take the op's tensors
in order and `sm_scale` as an attribute.
"""

from __future__ import annotations

import torch

from dayzero.plugins.gqa import cache_layout, reference
from dayzero.plugins.onnx_node import dayzero_node
from dayzero.plugins.registry import onnx_translation, plugin_op

KERNEL_Q_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _unit_last_stride(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def _write_kv_fake(cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    return None


def _prefill_fake(q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens: torch.Tensor,
                  positions: torch.Tensor, sm_scale: float) -> torch.Tensor:
    return torch.empty_like(q, memory_format=torch.contiguous_format)


def _decode_fake(q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor, positions: torch.Tensor,
                 sm_scale: float) -> torch.Tensor:
    return torch.empty_like(q, memory_format=torch.contiguous_format)


@plugin_op("write_kv", cpu=cache_layout.write_kv, fake=_write_kv_fake, mutates_args=("cache",))
def write_kv(cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """cache <- k, v [T, Hkv, D] at slot_mapping [T] (-1 skipped); FP8 with per-(token, head) scales for uint8."""
    from torch.library import wrap_triton

    from dayzero.plugins.gqa.write_kernel import write_kv_launcher

    write_kv_launcher(cache, _unit_last_stride(k), _unit_last_stride(v), slot_mapping, launch=wrap_triton)


@plugin_op("gqa_prefill_paged", cpu=reference.gqa_prefill_paged, fake=_prefill_fake)
def gqa_prefill_paged(q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens: torch.Tensor,
                      positions: torch.Tensor, sm_scale: float) -> torch.Tensor:
    """q [T, Hq, D] -> o [T, Hq, D]: token t over the positions 0..positions[t] of its sequence."""
    if q.dtype not in KERNEL_Q_DTYPES:
        return reference.gqa_prefill_paged(q, kv_cache, block_table, cu_seqlens, positions, sm_scale)
    from torch.library import wrap_triton

    from dayzero.plugins.gqa.kernel import gqa_prefill_launcher

    return gqa_prefill_launcher(_unit_last_stride(q), kv_cache, block_table.contiguous(), cu_seqlens, positions,
                                sm_scale, launch=wrap_triton)


@plugin_op("gqa_decode_paged", cpu=reference.gqa_decode_paged, fake=_decode_fake)
def gqa_decode_paged(q: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor, positions: torch.Tensor,
                     sm_scale: float) -> torch.Tensor:
    """q [B, L, Hq, D], positions [B, L] -> o [B, L, Hq, D]."""
    if q.dtype not in KERNEL_Q_DTYPES:
        return reference.gqa_decode_paged(q, kv_cache, block_table, positions, sm_scale)
    from torch.library import wrap_triton

    from dayzero.plugins.gqa.kernel import gqa_decode_launcher

    return gqa_decode_launcher(_unit_last_stride(q), kv_cache, block_table.contiguous(), positions, sm_scale,
                               launch=wrap_triton)


@onnx_translation(write_kv)
def _write_kv_onnx(cache, k, v, slot_mapping):
    return dayzero_node("WriteKv", [cache, k, v, slot_mapping], [cache])


@onnx_translation(gqa_prefill_paged)
def _gqa_prefill_paged_onnx(q, kv_cache, block_table, cu_seqlens, positions, sm_scale: float):
    return dayzero_node("GqaPrefillPaged", [q, kv_cache, block_table, cu_seqlens, positions], [q], sm_scale=sm_scale)


@onnx_translation(gqa_decode_paged)
def _gqa_decode_paged_onnx(q, kv_cache, block_table, positions, sm_scale: float):
    return dayzero_node("GqaDecodePaged", [q, kv_cache, block_table, positions], [q], sm_scale=sm_scale)
