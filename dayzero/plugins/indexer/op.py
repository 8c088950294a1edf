"""`torch.ops.dayzero.index_topk_paged`: the fused indexer (scores + causal Top-K) over the paged index cache."""

from __future__ import annotations

import torch

from dayzero.plugins.indexer import reference
from dayzero.plugins.registry import ONNX_DOMAIN, onnx_translation, plugin_op


def _cpu(q: torch.Tensor, w: torch.Tensor, index_cache: torch.Tensor, block_table: torch.Tensor,
         cu_seqlens: torch.Tensor, positions: torch.Tensor, topk: int, scale: float | None = None,
         q_scales: torch.Tensor | None = None) -> torch.Tensor:
    return reference.index_topk_paged(q, w, index_cache, block_table, cu_seqlens, positions, topk, scale, q_scales)


def _fake(q: torch.Tensor, w: torch.Tensor, index_cache: torch.Tensor, block_table: torch.Tensor,
          cu_seqlens: torch.Tensor, positions: torch.Tensor, topk: int, scale: float | None = None,
          q_scales: torch.Tensor | None = None) -> torch.Tensor:
    return q.new_empty((q.shape[0], topk), dtype=torch.int32)


@plugin_op("index_topk_paged", cpu=_cpu, fake=_fake)
def index_topk_paged(q: torch.Tensor, w: torch.Tensor, index_cache: torch.Tensor, block_table: torch.Tensor,
                     cu_seqlens: torch.Tensor, positions: torch.Tensor, topk: int, scale: float | None = None,
                     q_scales: torch.Tensor | None = None) -> torch.Tensor:
    from torch.library import wrap_triton

    from dayzero.plugins.indexer.kernel import index_topk_paged_launcher

    return index_topk_paged_launcher(q.contiguous(), w.contiguous(), index_cache, block_table, cu_seqlens, positions,
                                     topk, scale, q_scales, launch=wrap_triton)


ONNX_OP_NAME = "IndexTopkPaged"
_FLOATS = ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"]
_INTS = ["tensor(int32)", "tensor(int64)"]


def _register_onnx_schema() -> None:
    """The ONNX schema of the custom node (once per process): inputs, the int32 output and the attributes."""
    import onnx.defs

    if onnx.defs.has(ONNX_OP_NAME, ONNX_DOMAIN):
        return
    param = onnx.defs.OpSchema.FormalParameter
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    attr = onnx.defs.OpSchema.Attribute
    onnx.defs.register_schema(onnx.defs.OpSchema(
        ONNX_OP_NAME, ONNX_DOMAIN, 1, "dayzero.plugins.indexer.reference.index_topk_paged",
        inputs=[param("q", "TQ"), param("w", "TW"), param("index_cache", "TC"), param("block_table", "TI"),
                param("cu_seqlens", "TI"), param("positions", "TP"),
                param("q_scales", "tensor(uint8)", param_option=optional)],
        outputs=[param("indices", "tensor(int32)")],
        type_constraints=[("TQ", [*_FLOATS, "tensor(float8e4m3fn)"], "query"), ("TW", _FLOATS, "head weights"),
                          ("TC", [*_FLOATS, "tensor(uint8)"], "index cache (uint8: MXFP8)"),
                          ("TI", _INTS, "tables"), ("TP", _INTS, "positions")],
        attributes=[attr("topk", onnx.defs.OpSchema.AttrType.INT, required=True),
                    attr("scale", onnx.defs.OpSchema.AttrType.FLOAT, "default DI^-1/2", required=False)]))


@onnx_translation(index_topk_paged)
def index_topk_paged_onnx(q, w, index_cache, block_table, cu_seqlens, positions, topk: int,
                          scale: float | None = None, q_scales=None):
    """One `dayzero::IndexTopkPaged` node (attributes topk, scale; q_scales an optional seventh input)."""
    import onnxscript

    _register_onnx_schema()
    node = getattr(onnxscript.values.Opset(ONNX_DOMAIN, 1), ONNX_OP_NAME)
    inputs = [q, w, index_cache, block_table, cu_seqlens, positions] + ([q_scales] if q_scales is not None else [])
    attributes = {"topk": topk} if scale is None else {"topk": topk, "scale": float(scale)}
    return node(*inputs, **attributes)


__all__ = ["index_topk_paged"]
