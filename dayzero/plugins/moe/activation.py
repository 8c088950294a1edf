"""Gated activations of the expert and dense MLPs, by name (a registry, not an if-chain)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F


def _swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


def _situ(gate: torch.Tensor, up: torch.Tensor, beta: float = 1.0, linear_beta: float | None = None) -> torch.Tensor:
    """Kimi K3 SiTU: beta * tanh(gate / beta) * sigmoid(gate), times up (soft-capped by linear_beta if set)."""
    activated = beta * torch.tanh(gate / beta) * torch.sigmoid(gate)
    if linear_beta is not None:
        up = linear_beta * torch.tanh(up / linear_beta)
    return activated * up


GATED_ACTIVATIONS: dict[str, Callable[..., torch.Tensor]] = {"silu": _swiglu, "situ": _situ}


def gated_activation(gate: torch.Tensor, up: torch.Tensor, name: str = "silu", **params) -> torch.Tensor:
    """act(gate) * up in fp32."""
    return GATED_ACTIVATIONS[name](gate.float(), up.float(), **params)
