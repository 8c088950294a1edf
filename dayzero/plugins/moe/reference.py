"""MoE routing and expert compute (docs/models.md), pure torch, fp32 math.

Router logits: x @ router^T in fp32 (`router_logits`).
Router: s = act(logits) (sigmoid or softmax); experts are chosen by s + correction_bias under grouped top-k
(a group scores as the sum of its two best biased scores; only the best `topk_group` groups compete); the
weights are s of the chosen experts, renormalized when asked, times `scaling`.
Experts: gated MLPs `down(act(gate(x)) * up(x))` stacked as w1 (gate) [E, I, D], w3 (up) [E, I, D], w2 (down)
[E, D, I].
Permutation (the grouped form the fast path and expert parallelism use): the T*k (token, slot) assignments,
flattened as a = t*k + j, are stably sorted by expert; `sorted_assignments[p]` is the assignment at sorted
position p, `assignment_positions[a]` its inverse, `expert_offsets[e]:expert_offsets[e+1]` expert e's rows. The
experts a rank owns are contiguous, so its rows are too: `expert_rank_offsets`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

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


def router_logits(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x [T, D], router weight [E, D] -> logits [T, E] fp32 (an fp32 GEMM, as the model computes them)."""
    return F.linear(x.float(), weight.float())


def route(
    logits: torch.Tensor, correction_bias: torch.Tensor | None, top_k: int, num_groups: int = 1,
    topk_group: int = 1, renormalize: bool = True, scaling: float = 1.0, activation: str = "sigmoid",
    shared_slot: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [T, E] -> (weights [T, top_k] fp32, expert ids [T, top_k] int64); with shared_slot [T, top_k + 1],
    the last column (expert E, weight 1.0): an always-on shared expert routed as expert E."""
    scores = ROUTER_ACTIVATIONS[activation](logits.float())
    biased = scores if correction_bias is None else scores + correction_bias.float()
    if num_groups > 1:
        biased = biased.masked_fill(~_group_mask(biased, num_groups, topk_group), float("-inf"))
    ids = biased.topk(top_k, dim=-1).indices
    weights = scores.gather(1, ids)
    if renormalize:
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
    weights = weights * scaling
    if shared_slot:
        weights = torch.cat([weights, weights.new_ones(weights.shape[0], 1)], dim=1)
        ids = torch.cat([ids, ids.new_full((ids.shape[0], 1), logits.shape[1])], dim=1)
    return weights, ids


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


def permute(
    x: torch.Tensor, ids: torch.Tensor, num_experts: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [T, D], ids [T, k] -> (x_sorted [T*k, D], sorted_assignments [T*k] int64, assignment_positions [T*k] int64,
    expert_offsets [E+1] int32)."""
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    positions = torch.empty_like(order)
    positions[order] = torch.arange(order.numel(), device=order.device)
    offsets = torch.zeros(num_experts + 1, dtype=torch.int32, device=ids.device)
    offsets[1:] = torch.bincount(flat, minlength=num_experts).cumsum(0)
    return x[order // ids.shape[1]], order, positions, offsets


def unpermute(y_sorted: torch.Tensor, weights: torch.Tensor, assignment_positions: torch.Tensor,
              shared: torch.Tensor | None = None) -> torch.Tensor:
    """y_sorted [T*k, D], weights [T, k], assignment_positions [T*k], shared [T, D] or None -> sum_j weights[t, j] *
    y[t, j] + shared[t] [T, D] (fp32 accumulation, y's dtype out)."""
    rows = y_sorted.float()[assignment_positions.view(weights.shape)]  # [T, k, D]
    out = (rows * weights.float()[..., None]).sum(1)
    return (out if shared is None else out + shared.float()).to(y_sorted.dtype)


def grouped_mlp(
    x_sorted: torch.Tensor, expert_offsets: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor,
    activation: str = "silu", **act_params,
) -> torch.Tensor:
    """Expert e's gated MLP on rows expert_offsets[e]:expert_offsets[e+1] of x_sorted [M, D] -> [M, D]."""
    out = torch.zeros_like(x_sorted)
    bounds = expert_offsets.tolist()
    for expert, (start, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        if end > start:
            out[start:end] = gated_mlp(x_sorted[start:end], w1[expert], w3[expert], w2[expert], activation,
                                       **act_params)
    return out


def grouped_mlp_shared(
    x_sorted: torch.Tensor, expert_offsets: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor,
    shared_w1: torch.Tensor, shared_w3: torch.Tensor, shared_w2: torch.Tensor, activation: str = "silu",
    **act_params,
) -> torch.Tensor:
    """grouped_mlp with one more expert E (shared_w1/w3 [I, D], shared_w2 [D, I]) after the bank's E experts;
    expert_offsets [E+2]. The bank is not copied: expert E's rows are computed apart (this is the CPU engine's path)."""
    out = grouped_mlp(x_sorted, expert_offsets[:-1], w1, w3, w2, activation, **act_params)
    start, end = expert_offsets[-2:].tolist()
    if end > start:
        out[start:end] = gated_mlp(x_sorted[start:end], shared_w1, shared_w3, shared_w2, activation, **act_params)
    return out


def expert_rank_offsets(expert_offsets: torch.Tensor, experts_per_rank: int) -> torch.Tensor:
    """expert_offsets [E+1] -> [R+1]: rank r (experts r*epr .. (r+1)*epr-1) owns sorted rows [o[r], o[r+1])."""
    if (expert_offsets.numel() - 1) % experts_per_rank:
        raise ValueError(f"{expert_offsets.numel() - 1} experts do not split into ranks of {experts_per_rank}")
    return expert_offsets[::experts_per_rank]
