"""`torch.ops.dayzero.{mxfp8,fp8_block}_{quantize,dequantize}`: the FP8 block formats as registered ops.

Same signatures and results as reference.py; ONNX translations emit one `dayzero` node each (Mxfp8Quantize,
Fp8BlockQuantize, Mxfp8Dequantize, Fp8BlockDequantize) with `block` (and `dtype`, an ONNX element type) as int
attributes.
"""

from __future__ import annotations

import functools

import torch

from dayzero.plugins.quant import reference
from dayzero.plugins.quant.reference import FP8_DTYPE, FP8_TILE, MX_BLOCK
from dayzero.plugins.registry import ONNX_DOMAIN, onnx_translation, plugin_op

ONNX_TENSOR_TYPES = [f"tensor({t})" for t in (
    "float", "bfloat16", "float16", "float8e4m3fn", "uint8", "int8", "int32", "int64", "bool")]


def _check_width(width: int, block: int) -> None:
    if width % block:
        raise ValueError(f"last dim {width} is not a multiple of the block size {block}")


def _quantize(x: torch.Tensor, block: int, scale_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    from torch.library import wrap_triton

    from dayzero.plugins.quant.kernel import quantize_launcher

    _check_width(x.shape[-1], block)
    q = torch.empty(x.shape, dtype=FP8_DTYPE, device=x.device)
    scales = torch.empty((*x.shape[:-1], x.shape[-1] // block), dtype=scale_dtype, device=x.device)
    quantize_launcher(x.contiguous(), q, scales, launch=wrap_triton)
    return q, scales


def _dequantize(q: torch.Tensor, scales: torch.Tensor, block: int, dtype: torch.dtype) -> torch.Tensor:
    from torch.library import wrap_triton

    from dayzero.plugins.quant.kernel import dequantize_launcher

    _check_width(q.shape[-1], block)
    out = torch.empty(q.shape, dtype=dtype, device=q.device)
    dequantize_launcher(q.contiguous(), scales.contiguous(), out, launch=wrap_triton)
    return out


def _quantize_fake(x: torch.Tensor, block: int, scale_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    _check_width(x.shape[-1], block)
    return x.new_empty(x.shape, dtype=FP8_DTYPE), x.new_empty((*x.shape[:-1], x.shape[-1] // block), dtype=scale_dtype)


def _mxfp8_quantize_fake(x: torch.Tensor, block: int = MX_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    return _quantize_fake(x, block, torch.uint8)


def _fp8_block_quantize_fake(x: torch.Tensor, block: int = FP8_TILE) -> tuple[torch.Tensor, torch.Tensor]:
    return _quantize_fake(x, block, torch.float32)


def _dequantize_fake(q: torch.Tensor, scales: torch.Tensor, block: int, dtype: torch.dtype) -> torch.Tensor:
    _check_width(q.shape[-1], block)
    return q.new_empty(q.shape, dtype=dtype)


def _mxfp8_dequantize_fake(q: torch.Tensor, scales: torch.Tensor, block: int = MX_BLOCK,
                           dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return _dequantize_fake(q, scales, block, dtype)


def _fp8_block_dequantize_fake(q: torch.Tensor, scales: torch.Tensor, block: int = FP8_TILE,
                               dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return _dequantize_fake(q, scales, block, dtype)


@plugin_op("mxfp8_quantize", cpu=reference.mxfp8_quantize, fake=_mxfp8_quantize_fake)
def mxfp8_quantize(x: torch.Tensor, block: int = MX_BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., D] -> (e4m3 [..., D], E8M0 scales uint8 [..., D/block])."""
    return _quantize(x, block, torch.uint8)


@plugin_op("fp8_block_quantize", cpu=reference.fp8_block_quantize, fake=_fp8_block_quantize_fake)
def fp8_block_quantize(x: torch.Tensor, block: int = FP8_TILE) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., D] -> (e4m3 [..., D], fp32 scales [..., D/block])."""
    return _quantize(x, block, torch.float32)


@plugin_op("mxfp8_dequantize", cpu=reference.mxfp8_dequantize, fake=_mxfp8_dequantize_fake)
def mxfp8_dequantize(q: torch.Tensor, scales: torch.Tensor, block: int = MX_BLOCK,
                     dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """q e4m3 [..., D], E8M0 scales uint8 [..., D/block] -> [..., D] in dtype."""
    return _dequantize(q, scales, block, dtype)


@plugin_op("fp8_block_dequantize", cpu=reference.fp8_block_dequantize, fake=_fp8_block_dequantize_fake)
def fp8_block_dequantize(q: torch.Tensor, scales: torch.Tensor, block: int = FP8_TILE,
                         dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """q e4m3 [..., D], fp32 scales [..., D/block] -> [..., D] in dtype."""
    return _dequantize(q, scales.float(), block, dtype)


@functools.cache
def dayzero_node(name: str, inputs: tuple[str, ...], outputs: tuple[str, ...], attributes: tuple[str, ...] = ()):
    """An onnxscript op that emits the node `dayzero::<name>` (any tensor types, int attributes).

    Custom-domain ops have no schema in the ONNX registry, and the exporter's tracer needs one to name inputs,
    attributes and outputs. onnxscript is imported here, so that the package works without it.
    """
    import onnx
    from onnxscript import values

    schema_type = onnx.defs.OpSchema
    params = {n: schema_type.FormalParameter(n, f"T_{n}") for n in (*inputs, *outputs)}
    schema = schema_type(
        name, ONNX_DOMAIN, 1,
        inputs=[params[n] for n in inputs], outputs=[params[n] for n in outputs],
        type_constraints=[(f"T_{n}", ONNX_TENSOR_TYPES, "") for n in params],
        attributes=[schema_type.Attribute(a, schema_type.AttrType.INT, "") for a in attributes],
    )
    return values.Op(values.Opset(ONNX_DOMAIN, 1), name, schema)


@onnx_translation(mxfp8_quantize)
def _mxfp8_quantize_onnx(x, block: int = MX_BLOCK):
    return dayzero_node("Mxfp8Quantize", ("x",), ("q", "scales"), ("block",))(x, block=block)


@onnx_translation(fp8_block_quantize)
def _fp8_block_quantize_onnx(x, block: int = FP8_TILE):
    return dayzero_node("Fp8BlockQuantize", ("x",), ("q", "scales"), ("block",))(x, block=block)


@onnx_translation(mxfp8_dequantize)
def _mxfp8_dequantize_onnx(q, scales, block: int = MX_BLOCK, dtype=1):
    node = dayzero_node("Mxfp8Dequantize", ("q", "scales"), ("out",), ("block", "dtype"))
    return node(q, scales, block=block, dtype=int(dtype))


@onnx_translation(fp8_block_dequantize)
def _fp8_block_dequantize_onnx(q, scales, block: int = FP8_TILE, dtype=1):
    node = dayzero_node("Fp8BlockDequantize", ("q", "scales"), ("out",), ("block", "dtype"))
    return node(q, scales, block=block, dtype=int(dtype))
