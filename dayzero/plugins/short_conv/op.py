"""`torch.ops.dayzero.short_conv_prefill` / `short_conv_decode`: the KDA q/k/v short conv, windows updated in place."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from dayzero.plugins.registry import ONNX_DOMAIN, onnx_translation, plugin_op
from dayzero.plugins.short_conv import reference


def _prefill_cpu(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor, cu_seqlens: torch.Tensor,
                 slots: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    return reference.short_conv_prefill(x, weight, conv_state, cu_seqlens, slots, activation)


def _decode_cpu(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor, state_slots: torch.Tensor,
                num_accepted: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    return reference.short_conv_decode(x, weight, conv_state, state_slots, num_accepted, activation)


def _fake(x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    return x.new_empty(x.shape)


@plugin_op("short_conv_prefill", cpu=_prefill_cpu, fake=_fake, mutates_args=("conv_state",))
def short_conv_prefill(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor, cu_seqlens: torch.Tensor,
                       slots: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    from torch.library import wrap_triton

    from dayzero.plugins.short_conv.kernel import short_conv_prefill_launcher

    return short_conv_prefill_launcher(x.contiguous(), weight.contiguous(), conv_state, cu_seqlens, slots,
                                       activation, launch=wrap_triton)


@plugin_op("short_conv_decode", cpu=_decode_cpu, fake=_fake, mutates_args=("conv_state",))
def short_conv_decode(x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor, state_slots: torch.Tensor,
                      num_accepted: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    from torch.library import wrap_triton

    from dayzero.plugins.short_conv.kernel import short_conv_decode_launcher

    return short_conv_decode_launcher(x.contiguous(), weight.contiguous(), conv_state, state_slots.contiguous(),
                                      num_accepted, activation, launch=wrap_triton)


def onnx_custom_node(name: str, inputs: Sequence[str], outputs: Sequence[str], attributes: dict[str, str]):
    """An onnxscript op of the `dayzero` domain (version 1) with a schema, so the exporter can record one node.

    Every input and output may have any tensor type; attributes map a name to "float", "int" or "string" and are
    optional. A mutating op lists its updated caches as extra outputs, after the op's own results.
    """
    from onnx.defs import OpSchema
    from onnxscript import values

    attr_types = {"float": OpSchema.AttrType.FLOAT, "int": OpSchema.AttrType.INT, "string": OpSchema.AttrType.STRING}
    schema = OpSchema(
        name, ONNX_DOMAIN, 1,
        inputs=[OpSchema.FormalParameter(n, f"T_{n}") for n in inputs],
        outputs=[OpSchema.FormalParameter(n, f"T_{n}") for n in outputs],
        type_constraints=[(f"T_{n}", _ONNX_TENSOR_TYPES, "") for n in (*inputs, *outputs)],
        attributes=[OpSchema.Attribute(n, attr_types[t], required=False) for n, t in attributes.items()],
    )
    return values.Op(values.Opset(ONNX_DOMAIN, 1), name, schema)


_ONNX_TENSOR_TYPES = [f"tensor({t})" for t in (
    "float", "float16", "bfloat16", "double", "int8", "uint8", "int32", "int64", "bool", "float8e4m3fn")]
_CONV_ATTRS = {"activation": "string"}


@onnx_translation(short_conv_prefill)
def short_conv_prefill_onnx(x, weight, conv_state, cu_seqlens, slots, activation: str = "silu"):
    """One `dayzero::short_conv_prefill` node: outputs (y, updated conv_state)."""
    node = onnx_custom_node("short_conv_prefill", ["x", "weight", "conv_state", "cu_seqlens", "slots"],
                            ["y", "conv_state_out"], _CONV_ATTRS)
    return node(x, weight, conv_state, cu_seqlens, slots, activation=activation)


@onnx_translation(short_conv_decode)
def short_conv_decode_onnx(x, weight, conv_state, state_slots, num_accepted, activation: str = "silu"):
    """One `dayzero::short_conv_decode` node: outputs (y, updated conv_state)."""
    node = onnx_custom_node("short_conv_decode", ["x", "weight", "conv_state", "state_slots", "num_accepted"],
                            ["y", "conv_state_out"], _CONV_ATTRS)
    return node(x, weight, conv_state, state_slots, num_accepted, activation=activation)
