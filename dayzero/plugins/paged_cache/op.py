"""`torch.ops.dayzero.{write_rows,write_latent,write_index_keys}`: scatter new rows into a paged cache in place.

write_latent / write_index_keys pick the format by the cache dtype (uint8 = quantized, formats.py) and run the
fused quantize + scatter kernel, or the plain row scatter. Their ONNX translations emit one `dayzero` node
(WriteRows, WriteLatent with a `rope_dim` attribute, WriteIndexKeys) whose output is the updated cache: the
functional form in which torch.export hands a mutating op on (auto_functionalized).
"""

from __future__ import annotations

import torch

from dayzero.plugins.paged_cache import formats, reference
from dayzero.plugins.quant.op import dayzero_node
from dayzero.plugins.registry import HAS_TRITON, onnx_translation, plugin_op


def _write_rows_cpu(cache: torch.Tensor, rows: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    reference.write_rows(cache, rows, slot_mapping)


def _write_rows_fake(cache: torch.Tensor, rows: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    return None


def _write_latent_fake(cache: torch.Tensor, rows: torch.Tensor, slot_mapping: torch.Tensor, rope_dim: int) -> None:
    return None


@plugin_op("write_rows", cpu=_write_rows_cpu, fake=_write_rows_fake, mutates_args=("cache",))
def write_rows(cache: torch.Tensor, rows: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    from torch.library import wrap_triton

    from dayzero.plugins.paged_cache.kernel import write_rows_launcher

    write_rows_launcher(cache, rows.reshape(rows.shape[0], -1).contiguous(), slot_mapping, launch=wrap_triton)


@plugin_op("write_latent", cpu=formats.write_latent, fake=_write_latent_fake, mutates_args=("cache",))
def write_latent(cache: torch.Tensor, rows: torch.Tensor, slot_mapping: torch.Tensor, rope_dim: int) -> None:
    """Latent cache <- rows [T, nope + rope] at slot_mapping (-1 skipped), FP8 records for a uint8 cache."""
    from torch.library import wrap_triton

    from dayzero.plugins.paged_cache.kernel import write_fp8_latent_launcher, write_rows_launcher

    if formats.is_quantized(cache):
        write_fp8_latent_launcher(cache, rows.contiguous(), slot_mapping, rope_dim, launch=wrap_triton)
    else:
        write_rows_launcher(cache, rows.contiguous(), slot_mapping, launch=wrap_triton)


@plugin_op("write_index_keys", cpu=formats.write_index_keys, fake=_write_rows_fake, mutates_args=("cache",))
def write_index_keys(cache: torch.Tensor, keys: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Index cache <- keys [T, DI] at slot_mapping (-1 skipped), MXFP8 page-major for a uint8 cache."""
    from torch.library import wrap_triton

    from dayzero.plugins.paged_cache.kernel import write_mxfp8_index_launcher, write_rows_launcher

    if formats.is_quantized(cache):
        write_mxfp8_index_launcher(cache, keys.contiguous(), slot_mapping, launch=wrap_triton)
    else:
        write_rows_launcher(cache, keys.contiguous(), slot_mapping, launch=wrap_triton)


@onnx_translation(write_rows)
def _write_rows_onnx(cache, rows, slot_mapping):
    return dayzero_node("WriteRows", ("cache", "rows", "slot_mapping"), ("cache_out",))(cache, rows, slot_mapping)


@onnx_translation(write_latent)
def _write_latent_onnx(cache, rows, slot_mapping, rope_dim: int):
    node = dayzero_node("WriteLatent", ("cache", "rows", "slot_mapping"), ("cache_out",), ("rope_dim",))
    return node(cache, rows, slot_mapping, rope_dim=rope_dim)


@onnx_translation(write_index_keys)
def _write_index_keys_onnx(cache, keys, slot_mapping):
    node = dayzero_node("WriteIndexKeys", ("cache", "keys", "slot_mapping"), ("cache_out",))
    return node(cache, keys, slot_mapping)


__all__ = ["write_index_keys", "write_latent", "write_rows", "HAS_TRITON"]
