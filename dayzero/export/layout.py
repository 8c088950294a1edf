"""Weight pre-layout, done once at export on the loaded reference model (in place; logits stay equal).

* KDA: the six projections of the layer input (q, k, v, f_a, g or g_a, b) become one GEMM `in_proj` (q, k, v first,
  so the conv input is a view of its output), the three conv kernels one [3, C, W] weight `qkv_conv1d`, and the
  low-rank gates' two up-projections one batched GEMM `fg_b_proj`;
* gated DeltaNet: in_proj_qkvz and in_proj_ba become one GEMM `in_proj` with its rows regrouped by kind (q, k, v, z,
  b, a of all heads, not per key head), so the conv input and the gates are slices of its output;
* MLA: W_UK and W_UV are split out of kv_b_proj once, as contiguous [H, n, c] / [H, v, c] weights (absorbed
  attention: W_UK folds into the query, W_UV follows the attention), instead of views sliced every step;
* AttnRes: each mix's RMSNorm weight folds into its score vector (proj ⊙ norm), the norm weight becomes ones;
* dense MLPs and shared experts: gate_proj and up_proj become one GEMM `gate_up_proj`.
Routed experts are already stacked as the grouped GEMM wants them ([E, I, D] gate/up, [E, D, I] down): nothing to
pack. Each pass is a registry entry so that a target can choose its own set.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from dayzero.model.gated_deltanet import GatedDeltaNet
from dayzero.model.hybrid import HybridModel
from dayzero.model.kda import ConvWeight, KDAttention
from dayzero.model.mla import MLAttention
from dayzero.model.mlp import GatedMLP


def frozen_linear(weight: torch.Tensor) -> nn.Linear:
    """A bias-free projection holding `weight` [out, in] as it is."""
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
    layer.weight = nn.Parameter(weight, requires_grad=False)
    return layer


def fuse_kda_input_projections(model: HybridModel) -> int:
    layers = [m for m in model.modules() if isinstance(m, KDAttention) and getattr(m, "in_proj", None) is None]
    for layer in layers:
        parts = [getattr(layer, name) for name in layer.input_projection_names()]
        fused = frozen_linear(torch.cat([p.weight for p in parts]))
        layer.in_proj_sizes = [p.out_features for p in parts]
        for name in layer.input_projection_names():
            delattr(layer, name)
        layer.in_proj = fused
    return len(layers)


def stack_kda_gate_up_projections(model: HybridModel) -> int:
    """The low-rank gates' up-projections f_b_proj and g_b_proj [C, r] as one [2, C, r] weight `fg_b_proj`: one
    batched GEMM over the f_a | g_a columns of `in_proj`'s output."""
    layers = [m for m in model.modules() if isinstance(m, KDAttention) and not m.cfg.full_rank_output_gate
              and getattr(m, "fg_b_proj", None) is None and getattr(m, "in_proj", None) is not None]
    for layer in layers:
        layer.fg_b_proj = nn.Parameter(torch.stack([layer.f_b_proj.weight, layer.g_b_proj.weight]),
                                       requires_grad=False)
        del layer.f_b_proj, layer.g_b_proj
    return len(layers)


def stack_kda_convs(model: HybridModel) -> int:
    """The q, k and v conv kernels [C, 1, W] as one [3, C, W] weight `qkv_conv1d`, as the conv ops take it."""
    layers = [m for m in model.modules() if isinstance(m, KDAttention) and getattr(m, "qkv_conv1d", None) is None]
    for layer in layers:
        weight = layer._conv_weight().contiguous()
        stacked = ConvWeight(0, 0)
        stacked.weight = nn.Parameter(weight, requires_grad=False)
        for name in ("q_conv1d", "k_conv1d", "v_conv1d"):
            delattr(layer, name)
        layer.qkv_conv1d = stacked
    return len(layers)


def fuse_gated_mlp_projections(model: HybridModel) -> int:
    """Dense MLPs and shared experts: gate_proj and up_proj [I, D] become one GEMM `gate_up_proj` [2I, D]."""
    mlps = [m for m in model.modules() if isinstance(m, GatedMLP) and getattr(m, "gate_up_proj", None) is None]
    for mlp in mlps:
        fused = frozen_linear(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))
        del mlp.gate_proj, mlp.up_proj
        mlp.gate_up_proj = fused
    return len(mlps)


def fuse_gdn_input_projections(model: HybridModel) -> int:
    layers = [m for m in model.modules() if isinstance(m, GatedDeltaNet) and getattr(m, "in_proj", None) is None]
    for layer in layers:
        rows = layer.input_rows().to(layer.in_proj_ba.weight.device)
        fused = frozen_linear(torch.cat([layer.in_proj_qkvz.weight, layer.in_proj_ba.weight])[rows])
        del layer.in_proj_qkvz, layer.in_proj_ba
        layer.in_proj = fused
    return len(layers)


def split_mla_absorption(model: HybridModel) -> int:
    layers = [m for m in model.modules() if isinstance(m, MLAttention) and getattr(m, "w_uk", None) is None]
    for layer in layers:
        w_uk, w_uv = layer._absorbed_weights()
        layer.register_buffer("w_uk", w_uk.contiguous())
        layer.register_buffer("w_uv", w_uv.contiguous())
        del layer.kv_b_proj
    return len(layers)


def fold_attnres_norms(model: HybridModel) -> int:
    folded = 0
    for module in model.modules():
        for name, child in list(module.named_children()):
            if name.endswith("_res_norm"):
                proj = getattr(module, name.replace("_res_norm", "_res_proj"))
                proj.weight.mul_(child.weight.to(proj.weight.dtype))
                child.weight.fill_(1.0)
                folded += 1
    return folded


LAYOUT_PASSES: dict[str, Callable[[HybridModel], int]] = {
    "kda_fused_input_projection": fuse_kda_input_projections,
    "kda_stacked_convs": stack_kda_convs,
    "kda_stacked_gate_up": stack_kda_gate_up_projections,
    "gdn_fused_input_projection": fuse_gdn_input_projections,
    "mla_absorbed_weights": split_mla_absorption,
    "attnres_folded_norms": fold_attnres_norms,
    "mlp_fused_gate_up": fuse_gated_mlp_projections,
}


@torch.no_grad()
def lay_out(model: HybridModel, passes: tuple[str, ...] = tuple(LAYOUT_PASSES)) -> dict[str, int]:
    """Apply the passes in place; -> how many layers / mixes each changed."""
    return {name: LAYOUT_PASSES[name](model) for name in passes}
