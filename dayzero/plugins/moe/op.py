"""`torch.ops.dayzero.moe_*`: router GEMM, router, permutation by expert, grouped expert MLP, un-permutation and
the gated activation; and the Python wrappers with the reference signatures the model calls."""

from __future__ import annotations

from typing import NamedTuple

import torch

from dayzero.plugins.moe import reference
from dayzero.plugins.moe.activation import activation_args, activation_params, gated_activation
from dayzero.plugins.onnx_node import dayzero_node
from dayzero.plugins.quant.reference import mxfp4_dequantize
from dayzero.plugins.registry import onnx_translation, plugin_op


class Mxfp4Weight(NamedTuple):
    """Stacked expert weights [E, N, K] kept as MXFP4: packed [E, N, K/2] uint8, scale [E, N, K/32] uint8."""

    packed: torch.Tensor
    scale: torch.Tensor

    def dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        return mxfp4_dequantize(self.packed, self.scale, dtype=dtype)


ExpertWeight = torch.Tensor | Mxfp4Weight


def _num_experts(w: ExpertWeight) -> int:
    return w.packed.shape[0] if isinstance(w, Mxfp4Weight) else w.shape[0]


def _act_params(activation: str, beta: float, linear_beta: float | None) -> dict[str, float]:
    return activation_params(activation, beta, linear_beta)


def _router_logits_fake(x, weight):
    return x.new_empty(x.shape[0], weight.shape[0], dtype=torch.float32)


@plugin_op("moe_router_logits", cpu=reference.router_logits, fake=_router_logits_fake)
def moe_router_logits(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    from torch.library import wrap_triton

    from dayzero.plugins.moe.router_gemm_kernel import router_logits_launcher

    return router_logits_launcher(x.contiguous(), weight.contiguous(), launch=wrap_triton)


def _route_fake(logits, correction_bias, top_k, num_groups, topk_group, renormalize, scaling, activation,
                shared_slot):
    tokens, width = logits.shape[0], top_k + shared_slot
    return logits.new_empty(tokens, width, dtype=torch.float32), logits.new_empty(tokens, width, dtype=torch.int64)


@plugin_op("moe_route", cpu=reference.route, fake=_route_fake)
def moe_route(logits: torch.Tensor, correction_bias: torch.Tensor | None, top_k: int, num_groups: int,
              topk_group: int, renormalize: bool, scaling: float, activation: str,
              shared_slot: bool) -> tuple[torch.Tensor, torch.Tensor]:
    from torch.library import wrap_triton

    from dayzero.plugins.moe.route_kernel import route_launcher

    bias = None if correction_bias is None else correction_bias.contiguous()
    return route_launcher(logits.contiguous(), bias, top_k, num_groups, topk_group, renormalize, scaling, activation,
                          launch=wrap_triton, shared_slot=shared_slot)


def _permute_fake(x, ids, num_experts):
    n = ids.numel()
    return (x.new_empty(n, x.shape[1]), ids.new_empty(n, dtype=torch.int64), ids.new_empty(n, dtype=torch.int64),
            ids.new_empty(num_experts + 1, dtype=torch.int32))


@plugin_op("moe_permute", cpu=reference.permute, fake=_permute_fake)
def moe_permute(x: torch.Tensor, ids: torch.Tensor,
                num_experts: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    from torch.library import wrap_triton

    from dayzero.plugins.moe.permute_kernel import permute_launcher

    return permute_launcher(x.contiguous(), ids.contiguous(), num_experts, launch=wrap_triton)


def _unpermute_fake(y_sorted, weights, assignment_positions, shared):
    return y_sorted.new_empty(weights.shape[0], y_sorted.shape[1])


@plugin_op("moe_unpermute", cpu=reference.unpermute, fake=_unpermute_fake)
def moe_unpermute(y_sorted: torch.Tensor, weights: torch.Tensor, assignment_positions: torch.Tensor,
                  shared: torch.Tensor | None) -> torch.Tensor:
    from torch.library import wrap_triton

    from dayzero.plugins.moe.permute_kernel import unpermute_launcher

    return unpermute_launcher(y_sorted.contiguous(), weights.contiguous(), assignment_positions,
                              None if shared is None else shared.contiguous(), launch=wrap_triton)


def _grouped_mlp_cpu(x_sorted, expert_offsets, w1, w3, w2, activation, beta, linear_beta):
    return reference.grouped_mlp(x_sorted, expert_offsets, w1, w3, w2, activation,
                                 **_act_params(activation, beta, linear_beta))


def _grouped_mlp_fake(x_sorted, expert_offsets, w1, w3, w2, activation, beta, linear_beta):
    return x_sorted.new_empty(x_sorted.shape[0], w2.shape[1])


@plugin_op("moe_grouped_mlp", cpu=_grouped_mlp_cpu, fake=_grouped_mlp_fake)
def moe_grouped_mlp(x_sorted: torch.Tensor, expert_offsets: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor,
                    w2: torch.Tensor, activation: str, beta: float, linear_beta: float | None) -> torch.Tensor:
    from torch.library import wrap_triton

    from dayzero.plugins.moe.grouped_mlp_paths import grouped_mlp_cuda

    return grouped_mlp_cuda(x_sorted.contiguous(), expert_offsets, w1, w3, w2, activation, beta, linear_beta,
                            launch=wrap_triton)


def _grouped_mlp_shared_cpu(x_sorted, expert_offsets, w1, w3, w2, shared_w1, shared_w3, shared_w2, activation, beta,
                            linear_beta):
    return reference.grouped_mlp_shared(x_sorted, expert_offsets, w1, w3, w2, shared_w1, shared_w3, shared_w2,
                                        activation, **_act_params(activation, beta, linear_beta))


def _grouped_mlp_shared_fake(x_sorted, expert_offsets, w1, w3, w2, shared_w1, shared_w3, shared_w2, activation, beta,
                             linear_beta):
    return x_sorted.new_empty(x_sorted.shape[0], w2.shape[1])


@plugin_op("moe_grouped_mlp_shared", cpu=_grouped_mlp_shared_cpu, fake=_grouped_mlp_shared_fake)
def moe_grouped_mlp_shared(x_sorted: torch.Tensor, expert_offsets: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor,
                           w2: torch.Tensor, shared_w1: torch.Tensor, shared_w3: torch.Tensor, shared_w2: torch.Tensor,
                           activation: str, beta: float, linear_beta: float | None) -> torch.Tensor:
    from torch.library import wrap_triton

    from dayzero.plugins.moe.grouped_mlp_paths import grouped_mlp_shared_triton

    return grouped_mlp_shared_triton(x_sorted.contiguous(), expert_offsets, w1, w3, w2, shared_w1, shared_w3,
                                     shared_w2, activation, beta, linear_beta, launch=wrap_triton)


def _grouped_mlp_mxfp4_cpu(x_sorted, expert_offsets, w1, w1_scale, w3, w3_scale, w2, w2_scale, activation, beta,
                           linear_beta):
    dense = [Mxfp4Weight(p, s).dequantize(x_sorted.dtype) for p, s in ((w1, w1_scale), (w3, w3_scale), (w2, w2_scale))]
    return _grouped_mlp_cpu(x_sorted, expert_offsets, *dense, activation, beta, linear_beta)


def _grouped_mlp_mxfp4_fake(x_sorted, expert_offsets, w1, w1_scale, w3, w3_scale, w2, w2_scale, activation, beta,
                            linear_beta):
    return x_sorted.new_empty(x_sorted.shape[0], w2.shape[1])


@plugin_op("moe_grouped_mlp_mxfp4", cpu=_grouped_mlp_mxfp4_cpu, fake=_grouped_mlp_mxfp4_fake)
def moe_grouped_mlp_mxfp4(x_sorted: torch.Tensor, expert_offsets: torch.Tensor, w1: torch.Tensor,
                          w1_scale: torch.Tensor, w3: torch.Tensor, w3_scale: torch.Tensor, w2: torch.Tensor,
                          w2_scale: torch.Tensor, activation: str, beta: float,
                          linear_beta: float | None) -> torch.Tensor:
    from torch.library import wrap_triton

    from dayzero.plugins.moe.grouped_mlp_paths import grouped_mlp_mxfp4_cuda

    return grouped_mlp_mxfp4_cuda(x_sorted.contiguous(), expert_offsets, w1, w1_scale, w3, w3_scale, w2, w2_scale,
                                  activation, beta, linear_beta, launch=wrap_triton)


def _gated_activation_cpu(gate, up, activation, beta, linear_beta):
    return gated_activation(gate, up, activation, **_act_params(activation, beta, linear_beta)).to(gate.dtype)


def _gated_activation_fake(gate, up, activation, beta, linear_beta):
    return gate.new_empty(gate.shape)


@plugin_op("moe_gated_activation", cpu=_gated_activation_cpu, fake=_gated_activation_fake)
def moe_gated_activation(gate: torch.Tensor, up: torch.Tensor, activation: str, beta: float,
                         linear_beta: float | None) -> torch.Tensor:
    from torch.library import wrap_triton

    from dayzero.plugins.moe.activation_kernel import gated_activation_launcher

    return gated_activation_launcher(gate, up, activation, beta, linear_beta, launch=wrap_triton)


def router_logits(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x [T, D], router weight [E, D] -> logits [T, E] fp32 (see reference.router_logits). The kernel takes a bf16
    x (and an fp32 or bf16 weight); other dtypes go through the reference."""
    if x.dtype != torch.bfloat16 or weight.dtype not in (torch.float32, torch.bfloat16):
        return reference.router_logits(x, weight)
    return moe_router_logits(x, weight)


def route(
    logits: torch.Tensor, correction_bias: torch.Tensor | None, top_k: int, num_groups: int = 1,
    topk_group: int = 1, renormalize: bool = True, scaling: float = 1.0, activation: str = "sigmoid",
    shared_slot: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [T, E] -> (weights [T, top_k] fp32, expert ids [T, top_k] int64), with shared_slot one more column
    (expert E, weight 1.0); see reference.route."""
    return moe_route(logits, correction_bias, top_k, num_groups, topk_group, renormalize, float(scaling), activation,
                     shared_slot)


def permute(x: torch.Tensor, ids: torch.Tensor, num_experts: int):
    """x [T, D], ids [T, k] -> (x_sorted [T*k, D], sorted_assignments, assignment_positions, expert_offsets [E+1])."""
    return moe_permute(x, ids, num_experts)


def unpermute(y_sorted: torch.Tensor, weights: torch.Tensor, assignment_positions: torch.Tensor,
              shared: torch.Tensor | None = None) -> torch.Tensor:
    """y_sorted [T*k, D], weights [T, k] -> the routing-weighted sum per token plus `shared` (if given) [T, D]."""
    return moe_unpermute(y_sorted, weights, assignment_positions, shared)


def grouped_mlp(x_sorted: torch.Tensor, expert_offsets: torch.Tensor, w1: ExpertWeight, w3: ExpertWeight,
                w2: ExpertWeight, activation: str = "silu", **act_params) -> torch.Tensor:
    """Expert e's gated MLP on its rows expert_offsets[e]:expert_offsets[e+1] of x_sorted [M, D] -> [M, D]; the
    weights dense tensors or all three Mxfp4Weight."""
    args = activation_args(activation, act_params)
    if isinstance(w1, Mxfp4Weight):
        return moe_grouped_mlp_mxfp4(x_sorted, expert_offsets, *w1, *w3, *w2, activation, *args)
    return moe_grouped_mlp(x_sorted, expert_offsets, w1, w3, w2, activation, *args)


def moe_experts(
    x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor, w1: ExpertWeight, w3: ExpertWeight,
    w2: ExpertWeight, activation: str = "silu", shared: torch.Tensor | None = None, **act_params,
) -> torch.Tensor:
    """Weighted sum over each token's chosen experts: x [T, D], weights/ids [T, k] -> [T, D] in x's dtype, plus
    `shared` [T, D] (the shared experts' output) if given, added in the same fp32 sum."""
    x_sorted, _, positions, offsets = permute(x, ids, _num_experts(w1))
    return unpermute(grouped_mlp(x_sorted, offsets, w1, w3, w2, activation, **act_params), weights, positions, shared)


def fuses_shared_expert(x: torch.Tensor, rows: int, num_experts: int) -> bool:
    """Whether a shared expert can run as expert E inside the routed experts' Triton grouped GEMMs
    (moe_experts_with_shared): where the grouped MLP of `rows` rows over `num_experts` experts takes the Triton GEMM
    (few rows per expert, or no torch._grouped_mm)."""
    from dayzero.plugins.moe.grouped_mlp_paths import takes_grouped_mm

    return not takes_grouped_mm(x, rows, num_experts)


def moe_experts_with_shared(
    x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor,
    shared_w1: torch.Tensor, shared_w3: torch.Tensor, shared_w2: torch.Tensor, activation: str = "silu",
    **act_params,
) -> torch.Tensor:
    """moe_experts plus one always-on shared expert of the routed experts' shape (shared_w1/w3 [I, D], shared_w2
    [D, I]) run as expert E in the same grouped GEMMs: weights/ids [T, k+1] from route(shared_slot=True), whose last
    column (E, 1.0) is the shared expert's assignment."""
    x_sorted, _, positions, offsets = permute(x, ids, w1.shape[0] + 1)
    y_sorted = moe_grouped_mlp_shared(x_sorted, offsets, w1, w3, w2, shared_w1, shared_w3, shared_w2, activation,
                                      *activation_args(activation, act_params))
    return unpermute(y_sorted, weights, positions)


def moe_local_experts(
    x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor, first_expert: int, w1: ExpertWeight, w3: ExpertWeight,
    w2: ExpertWeight, activation: str = "silu", shared: torch.Tensor | None = None, **act_params,
) -> torch.Tensor:
    """Expert parallelism: this rank's share of the weighted sum, from its experts first_expert .. + w1.shape[0] - 1
    only (ids are global), plus `shared` if given; the ranks' shares sum to moe_experts.

    Other ranks' assignments go to a sink group sorted last; the grouped MLP runs on the local groups alone and the
    sink rows, which no kernel writes, are zeroed before the weighted sum."""
    num_local = _num_experts(w1)
    local = (ids >= first_expert) & (ids < first_expert + num_local)
    x_sorted, _, positions, offsets = permute(x, torch.where(local, ids - first_expert, num_local), num_local + 1)
    y_sorted = grouped_mlp(x_sorted, offsets[: num_local + 1], w1, w3, w2, activation, **act_params)
    rows = torch.arange(y_sorted.shape[0], device=y_sorted.device)[:, None]
    y_sorted = torch.where(rows < offsets[num_local], y_sorted, 0)
    return unpermute(y_sorted, weights, positions, shared)


def gated_mlp(x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor | None, w2: torch.Tensor, activation: str = "silu",
              **act_params) -> torch.Tensor:
    """One gated MLP: x [T, D], w1/w3 [I, D], w2 [D, I] -> [T, D] (fp32 activation, x's dtype out). w3 None: w1 is
    the gate and up rows stacked [2I, D] (one GEMM; the activation reads the halves of its output in place)."""
    if w3 is None:
        gate, up = (x @ w1.t()).chunk(2, dim=-1)
    else:
        gate, up = x @ w1.t(), x @ w3.t()
    return moe_gated_activation(gate, up, activation, *activation_args(activation, act_params)) @ w2.t()


@onnx_translation(moe_router_logits)
def _moe_router_logits_onnx(x, weight):
    # plain ONNX ops: the fp32 GEMM the op's result equals
    from onnxscript import opset18 as onnx_op

    return onnx_op.MatMul(onnx_op.Cast(x, to=1), onnx_op.Transpose(onnx_op.Cast(weight, to=1), perm=[1, 0]))


@onnx_translation(moe_route)
def _moe_route_onnx(logits, correction_bias, top_k: int, num_groups: int, topk_group: int, renormalize: bool,
                    scaling: float, activation: str, shared_slot: bool):
    inputs = [logits] + ([] if correction_bias is None else [correction_bias])
    return dayzero_node("MoeRoute", inputs, [None, None], top_k=top_k, num_groups=num_groups,
                        topk_group=topk_group, renormalize=renormalize, scaling=scaling, activation=activation,
                        has_correction_bias=correction_bias is not None, shared_slot=shared_slot)


@onnx_translation(moe_permute)
def _moe_permute_onnx(x, ids, num_experts: int):
    return dayzero_node("MoePermute", [x, ids], [x, None, None, None], num_experts=num_experts)


@onnx_translation(moe_unpermute)
def _moe_unpermute_onnx(y_sorted, weights, assignment_positions, shared):
    inputs = [y_sorted, weights, assignment_positions] + ([] if shared is None else [shared])
    return dayzero_node("MoeUnpermute", inputs, [None], has_shared=shared is not None)


@onnx_translation(moe_grouped_mlp)
def _moe_grouped_mlp_onnx(x_sorted, expert_offsets, w1, w3, w2, activation: str, beta: float,
                          linear_beta: float | None):
    return dayzero_node("MoeGroupedMlp", [x_sorted, expert_offsets, w1, w3, w2], [x_sorted], activation=activation,
                        beta=beta, linear_beta=0.0 if linear_beta is None else linear_beta,
                        has_linear_beta=linear_beta is not None)


@onnx_translation(moe_grouped_mlp_shared)
def _moe_grouped_mlp_shared_onnx(x_sorted, expert_offsets, w1, w3, w2, shared_w1, shared_w3, shared_w2,
                                 activation: str, beta: float, linear_beta: float | None):
    return dayzero_node("MoeGroupedMlpShared", [x_sorted, expert_offsets, w1, w3, w2, shared_w1, shared_w3, shared_w2],
                        [x_sorted], activation=activation, beta=beta,
                        linear_beta=0.0 if linear_beta is None else linear_beta,
                        has_linear_beta=linear_beta is not None)


@onnx_translation(moe_grouped_mlp_mxfp4)
def _moe_grouped_mlp_mxfp4_onnx(x_sorted, expert_offsets, w1, w1_scale, w3, w3_scale, w2, w2_scale, activation: str,
                                beta: float, linear_beta: float | None):
    return dayzero_node("MoeGroupedMlpMxfp4", [x_sorted, expert_offsets, w1, w1_scale, w3, w3_scale, w2, w2_scale],
                        [x_sorted], activation=activation, beta=beta,
                        linear_beta=0.0 if linear_beta is None else linear_beta,
                        has_linear_beta=linear_beta is not None)


@onnx_translation(moe_gated_activation)
def _moe_gated_activation_onnx(gate, up, activation: str, beta: float, linear_beta: float | None):
    return dayzero_node("MoeGatedActivation", [gate, up], [gate], activation=activation, beta=beta,
                        linear_beta=0.0 if linear_beta is None else linear_beta,
                        has_linear_beta=linear_beta is not None)
