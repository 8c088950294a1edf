"""Qwen3-Next (`qwen3_next`): gated DeltaNet layers, with gated grouped-query attention every
`full_attention_interval`-th layer (or as `layer_types` lists them); MoE layers with softmax routing and one shared
expert scaled by a sigmoid gate, dense MLPs in `mlp_only_layers` and off the `decoder_sparse_step`; RMSNorms that
scale by (1 + weight).

Tensor names: a gated DeltaNet layer is `linear_attn.` (dayzero's token mixer is `self_attn.`) with the fused
`in_proj_qkvz`, `in_proj_ba` and `conv1d` the network holds as stored; the feed-forward is `mlp.` whether dense or
MoE, the shared expert `mlp.shared_expert.` and its gate `mlp.shared_expert_gate`; routed experts as DeepSeek-V3.2's
(one tensor per expert, or transformers' fused banks).
"""

from __future__ import annotations

import re
from typing import Any

from dayzero.errors import DayzeroError
from dayzero.model.adapters import sections
from dayzero.model.adapters.base import Adapter
from dayzero.model.adapters.deepseek_v32 import DeepseekV32
from dayzero.model.fields import ConfigFields
from dayzero.model.layer_config import DENSE, GDN, GQA, MOE, GDNConfig, GQAConfig, MoEConfig
from dayzero.model.limits import MAX_EXPERTS

GDN_PARAM = re.compile(r"\.self_attn\.(?=(in_proj_qkvz|in_proj_ba|conv1d|A_log|dt_bias|norm|out_proj)\b)")
LAYER_TYPES = {"linear_attention": GDN, "full_attention": GQA}


def layer_kinds(f: ConfigFields, num_layers: int) -> tuple[str, ...]:
    """`layer_types`, or every `full_attention_interval`-th layer full attention (transformers' default: 4)."""
    types = f.data.get("layer_types")
    if types is None:
        interval = f.int("full_attention_interval", 4)
        types = ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(num_layers)]
    if not isinstance(types, list) or len(types) != num_layers or any(t not in LAYER_TYPES for t in types):
        raise DayzeroError(f"{f.where}: field 'layer_types' must list {num_layers} of "
                           f"{', '.join(map(repr, LAYER_TYPES))}, got {types!r}")
    return tuple(LAYER_TYPES[t] for t in types)


def mlp_kinds(f: ConfigFields, num_layers: int) -> tuple[str, ...]:
    """Layer i is MoE iff it is not in `mlp_only_layers`, there are experts and (i + 1) % decoder_sparse_step == 0."""
    dense = set(f.int_list("mlp_only_layers", []))
    num_experts = f.int("num_experts", 0, minimum=0, maximum=MAX_EXPERTS)
    step = f.int("decoder_sparse_step", 1)
    return tuple(MOE if i not in dense and num_experts and (i + 1) % step == 0 else DENSE for i in range(num_layers))


def moe(f: ConfigFields) -> MoEConfig:
    shared = f.int("shared_expert_intermediate_size", 0, minimum=0)
    return MoEConfig(
        num_experts=f.int("num_experts", maximum=MAX_EXPERTS),
        top_k=f.int("num_experts_per_tok"),
        intermediate_size=f.int("moe_intermediate_size"),
        num_shared_experts=1 if shared else 0,
        renormalize=f.bool("norm_topk_prob", True),
        router_activation="softmax",
        router_bias=False,
        shared_intermediate_size=shared or None,
        shared_expert_gate=bool(shared),
    )


def gdn(f: ConfigFields) -> GDNConfig:
    return GDNConfig(
        num_key_heads=f.int("linear_num_key_heads"),
        num_value_heads=f.int("linear_num_value_heads"),
        key_head_dim=f.int("linear_key_head_dim"),
        value_head_dim=f.int("linear_value_head_dim"),
        conv_size=f.int("linear_conv_kernel_dim", 4),
    )


def rotary_factor(f: ConfigFields) -> float:
    """`partial_rotary_factor`, or `rope_parameters.partial_rotary_factor` (as transformers writes it); 0.25 unsaid."""
    params = f.sub("rope_parameters")
    if params is not None and params.has("partial_rotary_factor"):
        return params.float("partial_rotary_factor", positive=True)
    return f.float("partial_rotary_factor", 0.25, positive=True)


def refuse_rope_scaling(f: ConfigFields) -> None:
    for name in ("rope_scaling", "rope_parameters"):
        s = f.sub(name)
        kind = None if s is None else s.data.get("type", s.data.get("rope_type", "default"))
        if kind not in (None, "default"):
            raise DayzeroError(f"{s.where}: RoPE type {kind!r} is not supported for qwen3_next; dayzero applies its "
                               "plain RoPE")


def gqa(f: ConfigFields) -> GQAConfig:
    refuse_rope_scaling(f)
    heads = f.int("num_attention_heads")
    head_dim = f.int("head_dim", None) or f.int("hidden_size") // heads
    return GQAConfig(
        num_heads=heads,
        num_kv_heads=f.int("num_key_value_heads", heads),
        head_dim=head_dim,
        rotary_dim=int(head_dim * rotary_factor(f)),
        rope_theta=sections.rope_theta(f),
        norm_eps=f.float("rms_norm_eps", 1e-6, positive=True),
    )


class Qwen3Next(Adapter):
    model_type = "qwen3_next"

    def describe(self, f: ConfigFields) -> dict[str, Any]:
        sections.refuse_true(f, "attention_bias")
        num_layers = sections.num_layers(f)
        kinds, ffn = layer_kinds(f, num_layers), mlp_kinds(f, num_layers)
        return dict(
            **{**sections.common(f), "rms_norm_eps": f.float("rms_norm_eps", 1e-6, positive=True)},
            layer_kinds=kinds,
            mlp_kinds=ffn,
            intermediate_size=sections.intermediate_size(f, ffn),
            moe=moe(f) if MOE in ffn else None,
            kda=None,
            mla=None,
            indexer=None,
            gdn=gdn(f) if GDN in kinds else None,
            gqa=gqa(f) if GQA in kinds else None,
            zero_centered_norm=True,
        )

    def stored_names(self, name: str) -> tuple[str, ...]:
        name = GDN_PARAM.sub(".linear_attn.", name)
        return (name.replace(".block_sparse_moe.", ".mlp.").replace(".shared_experts.", ".shared_expert."),)

    expert_sources = DeepseekV32.expert_sources


ADAPTER = Qwen3Next()
