"""`torch.ops.dayzero.write_pooled_index_keys_prefill` / `_decode` and `pooled_index_topk_paged`: the pooled index
cache's write (pools completed by the step's tokens, and each sequence's window of pending rows) and the indexer
over pooled pages (pooled_reference.py). On CUDA: pool_kernel.py's writes and the Top-K kernels over pooled pages
(pooled_select.py; pool sizes that do not divide a page take the reference)."""

from __future__ import annotations

import torch

from dayzero.plugins.indexer import pooled_reference as reference
from dayzero.plugins.onnx_node import dayzero_node
from dayzero.plugins.registry import onnx_translation, plugin_op


def _write_fake(index_cache, window, rows, ape, slot_mapping, positions, bounds, slots, *rest):
    return None


def _topk_fake(q, w, index_cache, block_table, cu_seqlens, positions, topk, kpool, scale=None, q_scales=None):
    return q.new_empty((q.shape[0], topk + kpool - 1), dtype=torch.int32)


@plugin_op("write_pooled_index_keys_prefill", cpu=reference.write_pooled_index_keys_prefill, fake=_write_fake,
           mutates_args=("index_cache", "window"))
def write_pooled_index_keys_prefill(index_cache: torch.Tensor, window: torch.Tensor, rows: torch.Tensor,
                                    ape: torch.Tensor, slot_mapping: torch.Tensor, positions: torch.Tensor,
                                    cu_seqlens: torch.Tensor, slots: torch.Tensor) -> None:
    from torch.library import wrap_triton

    from dayzero.plugins.indexer.pool_kernel import write_pooled_index_keys_prefill_launcher

    write_pooled_index_keys_prefill_launcher(index_cache, window, rows.contiguous(), ape.contiguous(), slot_mapping,
                                             positions, cu_seqlens, slots, launch=wrap_triton)


@plugin_op("write_pooled_index_keys_decode", cpu=reference.write_pooled_index_keys_decode, fake=_write_fake,
           mutates_args=("index_cache", "window"))
def write_pooled_index_keys_decode(index_cache: torch.Tensor, window: torch.Tensor, rows: torch.Tensor,
                                   ape: torch.Tensor, slot_mapping: torch.Tensor, positions: torch.Tensor,
                                   state_slots: torch.Tensor, num_accepted: torch.Tensor) -> None:
    from torch.library import wrap_triton

    from dayzero.plugins.indexer.pool_kernel import write_pooled_index_keys_decode_launcher

    write_pooled_index_keys_decode_launcher(index_cache, window, rows.contiguous(), ape.contiguous(),
                                            slot_mapping.contiguous(), positions.contiguous(),
                                            state_slots.contiguous(), num_accepted, launch=wrap_triton)


@plugin_op("pooled_index_topk_paged", cpu=reference.pooled_index_topk_paged, fake=_topk_fake)
def pooled_index_topk_paged(q: torch.Tensor, w: torch.Tensor, index_cache: torch.Tensor, block_table: torch.Tensor,
                            cu_seqlens: torch.Tensor, positions: torch.Tensor, topk: int, kpool: int,
                            scale: float | None = None, q_scales: torch.Tensor | None = None) -> torch.Tensor:
    from torch.library import wrap_triton

    from dayzero.plugins.indexer.pooled_select import kernel_serves, pooled_index_topk_launcher

    if not kernel_serves(kpool):
        return reference.pooled_index_topk_paged(q, w, index_cache, block_table, cu_seqlens, positions, topk, kpool,
                                                 scale, q_scales)
    return pooled_index_topk_launcher(q.contiguous(), w.contiguous(), index_cache, block_table, cu_seqlens, positions,
                                      topk, kpool, scale, q_scales, launch=wrap_triton)


@onnx_translation(write_pooled_index_keys_prefill)
def _write_prefill_onnx(index_cache, window, rows, ape, slot_mapping, positions, cu_seqlens, slots):
    return dayzero_node("WritePooledIndexKeysPrefill",
                        [index_cache, window, rows, ape, slot_mapping, positions, cu_seqlens, slots],
                        [index_cache, window])


@onnx_translation(write_pooled_index_keys_decode)
def _write_decode_onnx(index_cache, window, rows, ape, slot_mapping, positions, state_slots, num_accepted):
    return dayzero_node("WritePooledIndexKeysDecode",
                        [index_cache, window, rows, ape, slot_mapping, positions, state_slots, num_accepted],
                        [index_cache, window])


@onnx_translation(pooled_index_topk_paged)
def _pooled_topk_onnx(q, w, index_cache, block_table, cu_seqlens, positions, topk: int, kpool: int,
                      scale: float | None = None, q_scales=None):
    inputs = [q, w, index_cache, block_table, cu_seqlens, positions] + ([q_scales] if q_scales is not None else [])
    return dayzero_node("PooledIndexTopkPaged", inputs, [None], topk=topk, kpool=kpool,
                        scale=0.0 if scale is None else float(scale), has_scale=scale is not None,
                        has_q_scales=q_scales is not None)
