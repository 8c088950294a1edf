"""MoE routing and expert compute (MODEL.md section 5), pure torch, fp32 math.

Router: s = act(logits) (sigmoid or softmax); experts are chosen by s + correction_bias under grouped top-k
(a group scores as the sum of its two best biased scores; only the best `topk_group` groups compete); the
weights are s of the chosen experts, renormalized when asked, times `scaling`.
Experts: gated MLPs `down(act(gate(x)) * up(x))` stacked as w1 (gate) [E, I, D], w3 (up) [E, I, D], w2 (down)
[E, D, I].
"""

from __future__ import annotations

import torch

from dayzero.plugins.moe.activation import gated_activation

ROUTER_ACTIVATIONS = {"sigmoid": torch.sigmoid, "softmax": lambda x: x.softmax(dim=-1)}


def _group_mask(biased: torch.Tensor, num_groups: int, topk_group: int) -> torch.Tensor:
    """[T, E] bool: experts whose group is among the `topk_group` best groups."""
    tokens, experts = biased.shape
    grouped = biased.view(tokens, num_groups, experts // num_groups)
    group_scores = grouped.topk(min(2, grouped.shape[-1]), dim=-1).values.sum(-1)
    best = group_scores.topk(topk_group, dim=-1).indices
    keep = torch.zeros(tokens, num_groups, dtype=torch.bool, device=biased.device).scatter_(1, best, True)
    return keep[:, :, None].expand_as(grouped).reshape(tokens, experts)


def route(
    logits: torch.Tensor, correction_bias: torch.Tensor | None, top_k: int, num_groups: int = 1,
    topk_group: int = 1, renormalize: bool = True, scaling: float = 1.0, activation: str = "sigmoid",
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [T, E] -> (weights [T, top_k] fp32, expert ids [T, top_k] int64)."""
    scores = ROUTER_ACTIVATIONS[activation](logits.float())
    biased = scores if correction_bias is None else scores + correction_bias.float()
    if num_groups > 1:
        biased = biased.masked_fill(~_group_mask(biased, num_groups, topk_group), float("-inf"))
    ids = biased.topk(top_k, dim=-1).indices
    weights = scores.gather(1, ids)
    if renormalize:
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
    return weights * scaling, ids


def gated_mlp(x, w1, w3, w2, activation: str = "silu", **act_params) -> torch.Tensor:
    """One gated MLP: x [T, D], w1/w3 [I, D], w2 [D, I] -> [T, D] (fp32 activation, x's dtype out)."""
    gate, up = x @ w1.t(), x @ w3.t()
    return gated_activation(gate, up, activation, **act_params).to(x.dtype) @ w2.t()


def moe_experts(
    x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor,
    w2: torch.Tensor, activation: str = "silu", **act_params,
) -> torch.Tensor:
    """Weighted sum over each token's chosen experts: x [T, D], weights/ids [T, k] -> [T, D] in x's dtype."""
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for expert in ids.unique().tolist():
        token, slot = (ids == expert).nonzero(as_tuple=True)
        y = gated_mlp(x[token], w1[expert], w3[expert], w2[expert], activation, **act_params)
        out.index_add_(0, token, y.float() * weights[token, slot, None])
    return out.to(x.dtype)
