"""`torch.ops.dayzero.rms_norm` / `gated_rms_norm` / `add_rms_norm`: RMSNorm of the last dimension (after a residual
add) in one launch (reference.py)."""

from __future__ import annotations

import torch

from dayzero.plugins.norm import reference
from dayzero.plugins.onnx_node import dayzero_node
from dayzero.plugins.registry import onnx_translation, plugin_op


def as_rows(t: torch.Tensor) -> torch.Tensor:
    """t [..., D] as [A, H, D] with unit column stride: a view where the layout allows (the kernel takes any strides
    over A and H), else a copy."""
    if t.stride(-1) != 1:
        t = t.contiguous()
    if t.dim() == 1:
        return t.view(1, 1, -1)
    if t.dim() == 2:
        return t.unsqueeze(1)
    return t.reshape(-1, *t.shape[-2:])


def _fake(x: torch.Tensor, *args) -> torch.Tensor:
    return x.new_empty(x.shape)


def _add_fake(hidden: torch.Tensor, *args) -> tuple[torch.Tensor, torch.Tensor]:
    return hidden.new_empty(hidden.shape), hidden.new_empty(hidden.shape)


@plugin_op("rms_norm", cpu=reference.rms_norm, fake=_fake)
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, zero_centered: bool = False) -> torch.Tensor:
    from torch.library import wrap_triton

    from dayzero.plugins.norm.kernel import rms_norm_launcher

    return rms_norm_launcher(as_rows(x), weight.contiguous(), eps, zero_centered, launch=wrap_triton).view(x.shape)


@plugin_op("gated_rms_norm", cpu=reference.gated_rms_norm, fake=_fake)
def gated_rms_norm(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float,
                   activation: str = "sigmoid") -> torch.Tensor:
    from torch.library import wrap_triton

    from dayzero.plugins.norm.kernel import gated_rms_norm_launcher

    return gated_rms_norm_launcher(as_rows(x), as_rows(gate), weight.contiguous(), eps, activation,
                                   launch=wrap_triton).view(x.shape)


@plugin_op("add_rms_norm", cpu=reference.add_rms_norm, fake=_add_fake)
def add_rms_norm(hidden: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor, eps: float,
                 zero_centered: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    from torch.library import wrap_triton

    from dayzero.plugins.norm.kernel import add_rms_norm_launcher

    total, y = add_rms_norm_launcher(as_rows(hidden), as_rows(delta), weight.contiguous(), eps, zero_centered,
                                     launch=wrap_triton)
    return total.view(hidden.shape), y.view(hidden.shape)


@onnx_translation(rms_norm)
def _rms_norm_onnx(x, weight, eps: float, zero_centered: bool = False):
    return dayzero_node("RmsNorm", [x, weight], [x], eps=eps, zero_centered=zero_centered)


@onnx_translation(gated_rms_norm)
def _gated_rms_norm_onnx(x, gate, weight, eps: float, activation: str = "sigmoid"):
    return dayzero_node("GatedRmsNorm", [x, gate, weight], [x], eps=eps, activation=activation)


@onnx_translation(add_rms_norm)
def _add_rms_norm_onnx(hidden, delta, weight, eps: float, zero_centered: bool = False):
    return dayzero_node("AddRmsNorm", [hidden, delta, weight], [hidden, hidden], eps=eps, zero_centered=zero_centered)
