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


def activation_args(activation: str, act_params: dict) -> tuple[float, float | None]:
    """(beta, linear_beta) of an activation's parameters, the scalar form the registered ops take."""
    if activation not in GATED_ACTIVATIONS:
        raise ValueError(f"unknown gated activation {activation!r}; known: {sorted(GATED_ACTIVATIONS)}")
    unknown = set(act_params) - {"beta", "linear_beta"}
    if unknown:
        raise ValueError(f"unknown activation parameters {sorted(unknown)}")
    return float(act_params.get("beta", 1.0)), act_params.get("linear_beta")
