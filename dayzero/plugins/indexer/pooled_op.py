"""`torch.ops.dayzero.write_pooled_index_keys_prefill` / `_decode` and `pooled_index_topk_paged`: the pooled index
cache's write (pools completed by the step's tokens, and each sequence's window of pending rows) and the indexer
over pooled pages (pooled_reference.py). The reference serves every device (one function registered for both)."""

from __future__ import annotations

import torch

from dayzero.plugins.indexer import pooled_reference as reference
from dayzero.plugins.onnx_node import dayzero_node
from dayzero.plugins.registry import onnx_translation, plugin_op


def _write_prefill(index_cache: torch.Tensor, window: torch.Tensor, rows: torch.Tensor, ape: torch.Tensor,
                   slot_mapping: torch.Tensor, positions: torch.Tensor, cu_seqlens: torch.Tensor,
                   slots: torch.Tensor) -> None:
    reference.write_pooled_index_keys_prefill(index_cache, window, rows, ape, slot_mapping, positions, cu_seqlens,
                                              slots)


def _write_decode(index_cache: torch.Tensor, window: torch.Tensor, rows: torch.Tensor, ape: torch.Tensor,
                  slot_mapping: torch.Tensor, positions: torch.Tensor, state_slots: torch.Tensor,
                  num_accepted: torch.Tensor) -> None:
    reference.write_pooled_index_keys_decode(index_cache, window, rows, ape, slot_mapping, positions, state_slots,
                                             num_accepted)


def _topk(q: torch.Tensor, w: torch.Tensor, index_cache: torch.Tensor, block_table: torch.Tensor,
          cu_seqlens: torch.Tensor, positions: torch.Tensor, topk: int, kpool: int, scale: float | None = None,
          q_scales: torch.Tensor | None = None) -> torch.Tensor:
    return reference.pooled_index_topk_paged(q, w, index_cache, block_table, cu_seqlens, positions, topk, kpool,
                                             scale, q_scales)


def _write_fake(index_cache, window, rows, ape, slot_mapping, positions, bounds, slots, *rest):
    return None


def _topk_fake(q, w, index_cache, block_table, cu_seqlens, positions, topk, kpool, scale=None, q_scales=None):
    return q.new_empty((q.shape[0], topk + kpool - 1), dtype=torch.int32)


write_pooled_index_keys_prefill = plugin_op("write_pooled_index_keys_prefill", cpu=_write_prefill, fake=_write_fake,
                                            mutates_args=("index_cache", "window"))(_write_prefill)
write_pooled_index_keys_decode = plugin_op("write_pooled_index_keys_decode", cpu=_write_decode, fake=_write_fake,
                                           mutates_args=("index_cache", "window"))(_write_decode)
pooled_index_topk_paged = plugin_op("pooled_index_topk_paged", cpu=_topk, fake=_topk_fake)(_topk)


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
