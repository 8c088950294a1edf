"""A whole MoE feed-forward layer from the plugin ops (MODEL.md section 5): router, routed experts (optionally in
a latent space: down-projection, experts, RMSNorm, up-projection) and always-on shared experts. The model's
`model/moe.py` composes the same ops from its modules; benchmarks and tests use this weight-explicit form."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from dayzero.plugins.moe.op import gated_mlp, moe_experts, route, router_logits


@dataclass(frozen=True)
class RouterSpec:
    top_k: int
    num_groups: int = 1
    topk_group: int = 1
    renormalize: bool = True
    scaling: float = 1.0
    activation: str = "sigmoid"


@dataclass(frozen=True)
class LatentProjection:
    """Routed experts work in a latent space: down [L, D], up [D, L], RMSNorm weight [L] (None: no norm)."""

    down: torch.Tensor
    up: torch.Tensor
    norm_weight: torch.Tensor | None
    eps: float = 1e-5


@dataclass(frozen=True)
class MoEWeights:
    """router [E, D], correction_bias [E] or None, w1/w3 [E, I, D_e], w2 [E, D_e, I] (D_e = L with a latent),
    shared (gate [Is, D], up [Is, D], down [D, Is]) or None."""

    router: torch.Tensor
    correction_bias: torch.Tensor | None
    w1: torch.Tensor
    w3: torch.Tensor
    w2: torch.Tensor
    shared: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    latent: LatentProjection | None = None
    activation: str = "silu"
    act_params: dict[str, float] = field(default_factory=dict)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def routed_experts(x: torch.Tensor, weights: MoEWeights, spec: RouterSpec) -> torch.Tensor:
    """x [T, D] -> the routing-weighted expert outputs [T, D] (through the latent space if there is one)."""
    logits = router_logits(x, weights.router)
    w, ids = route(logits, weights.correction_bias, spec.top_k, spec.num_groups, spec.topk_group,
                   spec.renormalize, spec.scaling, spec.activation)
    latent = weights.latent
    expert_in = x if latent is None else x @ latent.down.t()
    y = moe_experts(expert_in, w, ids, weights.w1, weights.w3, weights.w2, weights.activation, **weights.act_params)
    if latent is None:
        return y
    if latent.norm_weight is not None:
        y = _rms_norm(y, latent.norm_weight, latent.eps)
    return y @ latent.up.t()


def moe_layer(x: torch.Tensor, weights: MoEWeights, spec: RouterSpec) -> torch.Tensor:
    """x [T, D] -> routed + shared experts [T, D] in x's dtype."""
    y = routed_experts(x, weights, spec)
    if weights.shared is None:
        return y
    return y + gated_mlp(x, *weights.shared, weights.activation, **weights.act_params)
