"""Gated activations of the expert and dense MLPs, by name (a registry, not an if-chain).

The registered ops take an activation's parameters as two scalars, `beta` and `linear_beta` (activation_args):
SiTU's beta and optional linear beta; the clamped SwiGLU's limit rides in `beta`."""

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


def _clamped_swiglu(gate: torch.Tensor, up: torch.Tensor, limit: float) -> torch.Tensor:
    """GLM-5.3's SwiGLU: gate clamped to at most limit, up to [-limit, limit]."""
    return F.silu(gate.clamp(max=limit)) * up.clamp(-limit, limit)


GATED_ACTIVATIONS: dict[str, Callable[..., torch.Tensor]] = {"silu": _swiglu, "situ": _situ,
                                                             "clamped_silu": _clamped_swiglu}
# each activation's parameters, in the order of the ops' scalars (beta, linear_beta)
ACTIVATION_PARAMS = {"silu": (), "situ": ("beta", "linear_beta"), "clamped_silu": ("limit",)}


def gated_activation(gate: torch.Tensor, up: torch.Tensor, name: str = "silu", **params) -> torch.Tensor:
    """act(gate) * up in fp32."""
    return GATED_ACTIVATIONS[name](gate.float(), up.float(), **params)


def activation_args(activation: str, act_params: dict) -> tuple[float, float | None]:
    """(beta, linear_beta) of an activation's parameters, the scalar form the registered ops take."""
    if activation not in GATED_ACTIVATIONS:
        raise ValueError(f"unknown gated activation {activation!r}; known: {sorted(GATED_ACTIVATIONS)}")
    unknown = set(act_params) - {"beta", "linear_beta", "limit"}
    if unknown:
        raise ValueError(f"unknown activation parameters {sorted(unknown)}")
    if activation == "clamped_silu":
        return float(act_params["limit"]), None
    return float(act_params.get("beta", 1.0)), act_params.get("linear_beta")


def activation_params(activation: str, beta: float, linear_beta: float | None) -> dict[str, float]:
    """The inverse of activation_args: the named parameters of the ops' scalars."""
    names = ACTIVATION_PARAMS[activation]
    values = dict(zip(names, (beta, linear_beta)))
    return {name: value for name, value in values.items() if value is not None}
