"""Fused Triton MoE router: per token, scores (sigmoid or softmax), bias-corrected grouped top-k, weights from the
unbiased scores of the chosen experts, renormalized and scaled. One program per token, all experts in registers.

Top-k is k rounds of argmax (ties go to the lower expert id) over the biased scores, each round masking its
pick; experts come out in descending biased score, as `torch.topk` orders them.

With a shared slot every token gets one more column, (expert E, weight 1.0): an always-on shared expert that the
permutation and the grouped GEMM then treat as expert E.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _scores(row, bias, idx, valid, x_max, x_sum, HAS_BIAS: tl.constexpr, SOFTMAX: tl.constexpr):
    """(scores, biased scores with -inf outside the experts) at expert ids `idx` (any shape)."""
    x = tl.load(row + idx, mask=valid, other=float("-inf")).to(tl.float32)
    if SOFTMAX:
        s = tl.exp(x - x_max) / x_sum
    else:
        s = tl.sigmoid(x)
    biased = s
    if HAS_BIAS:
        biased = s + tl.load(bias + idx, mask=valid, other=0.0).to(tl.float32)
    return s, tl.where(valid, biased, float("-inf"))


@triton.jit
def _kept_groups(row, bias, e, x_max, x_sum, NUM_GROUPS: tl.constexpr, GROUP_SIZE: tl.constexpr,
                 TOPK_GROUP: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_EG: tl.constexpr, HAS_BIAS: tl.constexpr,
                 SOFTMAX: tl.constexpr):
    """[BLOCK_E] bool: experts in the TOPK_GROUP groups whose two best biased scores sum highest."""
    g = tl.arange(0, BLOCK_G)
    j = tl.arange(0, BLOCK_EG)
    valid = (g[:, None] < NUM_GROUPS) & (j[None, :] < GROUP_SIZE)
    _, biased = _scores(row, bias, g[:, None] * GROUP_SIZE + j[None, :], valid, x_max, x_sum, HAS_BIAS, SOFTMAX)
    group_score = tl.max(biased, axis=1)
    if GROUP_SIZE > 1:
        first = tl.argmax(biased, axis=1)
        group_score += tl.max(tl.where(j[None, :] == first[:, None], float("-inf"), biased), axis=1)
    group_score = tl.where(g < NUM_GROUPS, group_score, float("-inf"))
    group_of = e // GROUP_SIZE
    keep = e < 0
    for _ in tl.static_range(TOPK_GROUP):
        best = tl.argmax(group_score, axis=0)
        keep = keep | (group_of == best)
        group_score = tl.where(g == best, float("-inf"), group_score)
    return keep


@triton.jit
def _route_kernel(
    logits, bias, weights, ids, scaling,
    E: tl.constexpr, BLOCK_E: tl.constexpr, TOP_K: tl.constexpr, BLOCK_K: tl.constexpr,
    NUM_GROUPS: tl.constexpr, TOPK_GROUP: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_EG: tl.constexpr,
    HAS_BIAS: tl.constexpr, SOFTMAX: tl.constexpr, RENORMALIZE: tl.constexpr, SHARED_SLOT: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    row = logits + t * E
    e = tl.arange(0, BLOCK_E)
    valid = e < E
    x_max = 0.0
    x_sum = 1.0
    if SOFTMAX:
        x = tl.load(row + e, mask=valid, other=float("-inf")).to(tl.float32)
        x_max = tl.max(x, axis=0)
        x_sum = tl.sum(tl.exp(x - x_max), axis=0)
    s, biased = _scores(row, bias, e, valid, x_max, x_sum, HAS_BIAS, SOFTMAX)
    if NUM_GROUPS > 1:
        keep = _kept_groups(row, bias, e, x_max, x_sum, NUM_GROUPS, E // NUM_GROUPS, TOPK_GROUP, BLOCK_G, BLOCK_EG,
                            HAS_BIAS, SOFTMAX)
        biased = tl.where(keep, biased, float("-inf"))
    k = tl.arange(0, BLOCK_K)
    chosen_w = tl.zeros([BLOCK_K], tl.float32)
    chosen_id = tl.zeros([BLOCK_K], tl.int64)
    for i in tl.static_range(TOP_K):
        best = tl.argmax(biased, axis=0)
        chosen_w = tl.where(k == i, tl.sum(tl.where(e == best, s, 0.0), axis=0), chosen_w)
        chosen_id = tl.where(k == i, best.to(tl.int64), chosen_id)
        biased = tl.where(e == best, float("-inf"), biased)
    if RENORMALIZE:
        chosen_w = chosen_w / (tl.sum(chosen_w, axis=0) + 1e-20)
    width = TOP_K + SHARED_SLOT
    tl.store(weights + t * width + k, chosen_w * scaling, mask=k < TOP_K)
    tl.store(ids + t * width + k, chosen_id, mask=k < TOP_K)
    if SHARED_SLOT:
        tl.store(weights + t * width + TOP_K, 1.0)
        tl.store(ids + t * width + TOP_K, tl.full([], E, tl.int64))


def route_launcher(
    logits: torch.Tensor, correction_bias: torch.Tensor | None, top_k: int, num_groups: int = 1,
    topk_group: int = 1, renormalize: bool = True, scaling: float = 1.0, activation: str = "sigmoid",
    out: tuple[torch.Tensor, torch.Tensor] | None = None, launch=None, shared_slot: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [T, E] (contiguous) -> (weights [T, top_k] fp32, expert ids [T, top_k] int64), into `out` if given.
    With shared_slot: [T, top_k + 1], the last column (E, 1.0)."""
    assert logits.dim() == 2 and logits.is_contiguous(), f"router logits must be contiguous [T, E], got {logits.shape}"
    assert activation in ("sigmoid", "softmax"), f"unknown router activation {activation!r}"
    tokens, experts = logits.shape
    assert 1 <= top_k <= experts and experts % num_groups == 0 and 1 <= topk_group <= num_groups
    if correction_bias is not None:
        assert correction_bias.shape == (experts,) and correction_bias.is_contiguous()
    width = top_k + shared_slot
    if out is None:
        out = (torch.empty(tokens, width, dtype=torch.float32, device=logits.device),
               torch.empty(tokens, width, dtype=torch.int64, device=logits.device))
    weights, ids = out
    assert weights.shape == ids.shape == (tokens, width) and weights.is_contiguous() and ids.is_contiguous()
    assert weights.dtype == torch.float32 and ids.dtype == torch.int64
    if tokens == 0:
        return weights, ids
    block_e = triton.next_power_of_2(experts)
    # the k argmax rounds are reductions over one token's experts: within one warp (up to 256 experts, two up to
    # 1024) they are shuffles, where more warps would add shared-memory round trips and barriers to every round
    num_warps = 1 if block_e <= 256 else 2 if block_e <= 1024 else 8
    kernel = launch(_route_kernel) if launch else _route_kernel
    kernel[(tokens,)](
        logits, correction_bias if correction_bias is not None else logits, weights, ids, scaling,
        experts, block_e, top_k, triton.next_power_of_2(top_k), num_groups, topk_group,
        triton.next_power_of_2(num_groups), triton.next_power_of_2(experts // num_groups),
        correction_bias is not None, activation == "softmax", renormalize, shared_slot, num_warps=num_warps)
    return weights, ids
