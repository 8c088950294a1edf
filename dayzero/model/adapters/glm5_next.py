"""GLM-5.3-Flash (`glm5_next`): a multimodal checkpoint whose language model (fields under `text_config`, tensors
under `model.language_model.`) is served; the vision tower (`vision_config`, `model.visual.`) is not loaded.

The language model: Kimi-style KDA layers (the lower-bounded gate, `linear_lower_bound`) and NoPE MLA layers with
q LoRA behind a DSA indexer whose keys are pooled (`index_kpool`), per `layer_types`; layers marked "shared" by
`indexer_types` attend over the previous layer's picks; dense first layers then MoE, per `mlp_layer_types`, with a
clamped SwiGLU (`swiglu_limit`); manifold-constrained hyper-connections (`hc_mult` streams) in place of the residual.

Tensor names: the release's are dayzero's (`q_conv1d`, `f_a_proj`, `A_log`, ... under `self_attn.`; experts one
tensor each) with the hyper-connections as `layers.{i}.hc_attn_fn` / `hc_attn_base` / `hc_attn_scale` (and
`hc_ffn_*`); transformers may write its own layout: the convs fused as `conv1d [3C, 1, W]` (q, k, v rows), the gate
under `forget_gate.`, `attn_hc.fn`, and fused experts as DeepSeek-V3.2's.
"""

from __future__ import annotations

import re
from typing import Any

from dayzero.errors import DayzeroError
from dayzero.model.adapters import sections
from dayzero.model.adapters.base import Stored, TensorPart
from dayzero.model.adapters.deepseek_v32 import DeepseekV32
from dayzero.model.adapters.glm_moe_dsa import indexer_types
from dayzero.model.fields import ConfigFields
from dayzero.model.layer_config import (
    DENSE,
    KDA,
    MLA,
    MOE,
    HyperConnectionConfig,
    IndexerConfig,
    KDAConfig,
    MLAConfig,
)

LAYER_TYPES = {"linear_attention": KDA, "indexed_attention": MLA, "full_attention": MLA}
MLP_TYPES = {"dense": DENSE, "sparse": MOE}
HC_PARAM = re.compile(r"^(?P<layer>.*\.layers\.\d+)\.(?P<hc>attn|ffn)_hc\.(?P<w>fn|base|scale)$")
CONV_PARAM = re.compile(r"^(?P<attn>.*\.self_attn)\.(?P<qkv>[qkv])_conv1d\.weight$")
FORGET_GATE = re.compile(r"^(?P<attn>.*\.self_attn)\.(?P<w>f_a_proj\.weight|f_b_proj\.weight|dt_bias|A_log)$")


def layer_kinds(f: ConfigFields, num_layers: int) -> tuple[str, ...]:
    """`layer_types`, or transformers' default: every fourth layer (3, 7, ...) MLA, the others KDA."""
    types = f.data.get("layer_types")
    if types is None:
        return tuple(MLA if i % 4 == 3 else KDA for i in range(num_layers))
    if not isinstance(types, list) or len(types) != num_layers or any(t not in LAYER_TYPES for t in types):
        raise DayzeroError(f"{f.where}: field 'layer_types' must give one of {', '.join(map(repr, LAYER_TYPES))} "
                           f"for each of the {num_layers} layers, got {types!r}")
    return tuple(LAYER_TYPES[t] for t in types)


def mlp_kinds(f: ConfigFields, num_layers: int) -> tuple[str, ...]:
    """`mlp_layer_types`, or transformers' default: three dense layers, then MoE."""
    types = f.data.get("mlp_layer_types")
    if types is None:
        return tuple(DENSE if i < 3 else MOE for i in range(num_layers))
    if not isinstance(types, list) or len(types) != num_layers or any(t not in MLP_TYPES for t in types):
        raise DayzeroError(f"{f.where}: field 'mlp_layer_types' must give 'dense' or 'sparse' for each of the "
                           f"{num_layers} layers, got {types!r}")
    return tuple(MLP_TYPES[t] for t in types)


def kda(f: ConfigFields) -> KDAConfig:
    """The flat `linear_*` fields, which a `linear_attn_config` block overrides (as transformers reads them)."""
    block = f.sub("linear_attn_config")
    # null: the Kimi-Linear gate
    lower_bound = None if f.data.get("linear_lower_bound", -5.0) is None else f.float("linear_lower_bound", -5.0)
    heads, dim, width = f.int("linear_num_heads", 64), f.int("linear_head_dim", 128), f.int("linear_conv_kernel_dim", 4)
    if block is not None:
        heads, dim = block.int("num_heads", heads), block.int("head_dim", dim)
        width = block.int("short_conv_kernel_size", width)
        if "gate_lower_bound" in block.data:
            lower_bound = block.float("gate_lower_bound", None)
        if lower_bound is None and block.bool("safe_gate", True):
            lower_bound = -5.0
    return KDAConfig(num_heads=heads, head_dim=dim, conv_size=width, gate_lower_bound=lower_bound)


def mla(f: ConfigFields, norm_eps: float) -> MLAConfig:
    """NoPE MLA with q LoRA; the attention's norms take rms_norm_eps."""
    if f.int("qk_rope_head_dim", 0, minimum=0):
        raise DayzeroError(f"{f.where}: field 'qk_rope_head_dim' must be 0 (GLM-5.3's MLA layers have no RoPE)")
    return MLAConfig(
        num_heads=f.int("num_attention_heads", 64), q_lora_rank=f.int("q_lora_rank", 1536),
        kv_lora_rank=f.int("kv_lora_rank", 512), qk_nope_head_dim=f.int("qk_nope_head_dim", 256),
        qk_rope_head_dim=0, v_head_dim=f.int("v_head_dim", 256), use_nope=True, norm_eps=norm_eps,
    )


def indexer(f: ConfigFields) -> IndexerConfig:
    if not f.bool("index_kpool_always_select_tail", True):
        raise DayzeroError(f"{f.where}: field 'index_kpool_always_select_tail' is false; dayzero's pooled indexer "
                           "always keeps the unfinished pool (a query would otherwise see no key of its own pool)")
    return IndexerConfig(num_heads=f.int("index_n_heads", 32), head_dim=f.int("index_head_dim", 128),
                         topk=f.int("index_topk", 2048), kpool=f.int("index_kpool", 16))


def shared_layers(f: ConfigFields, kinds: tuple[str, ...]) -> tuple[int, ...]:
    """MLA layers marked "shared": each reuses the picks of the layer right before it, which must run an indexer
    (transformers passes picks only from one layer to the next)."""
    types = indexer_types(f, len(kinds))
    shared = tuple(i for i, t in enumerate(types) if t == "shared" and kinds[i] == MLA)
    for layer in shared:
        if layer == 0 or kinds[layer - 1] != MLA or types[layer - 1] != "full":
            raise DayzeroError(f"{f.where}: layer {layer} reuses the previous layer's Top-K ('shared' in "
                               "indexer_types), but the layer before it is not an MLA layer running an indexer")
    return shared


class Glm5Next(DeepseekV32):
    model_type = "glm5_next"

    def text_fields(self, top: ConfigFields) -> ConfigFields:
        return top.sub("text_config") or top

    def ignored_parts(self, top: ConfigFields) -> tuple[str, ...]:
        if not top.has("vision_config"):
            return ()
        return ("vision tower (vision_config, model.visual.*): not loaded; dayzero serves the language model (text in, "
                "text out)",)

    def describe(self, f: ConfigFields) -> dict[str, Any]:
        sections.refuse_true(f, "attention_bias")
        num_layers = sections.num_layers(f)
        kinds, mlps = layer_kinds(f, num_layers), mlp_kinds(f, num_layers)
        common = sections.common(f)
        limit = f.float("swiglu_limit", None, positive=True)
        if limit is not None:
            common.update(hidden_act="clamped_silu", act_params={"limit": limit})
        return dict(
            **common,
            mlp_kinds=mlps,
            intermediate_size=sections.intermediate_size(f, mlps),
            moe=sections.moe(f) if MOE in mlps else None,
            layer_kinds=kinds,
            kda=kda(f) if KDA in kinds else None,
            mla=mla(f, common["rms_norm_eps"]) if MLA in kinds else None,
            indexer=indexer(f) if MLA in kinds else None,
            index_shared_layers=shared_layers(f, kinds),
            hyper_connections=HyperConnectionConfig(mult=f.int("hc_mult", 4), sinkhorn_iters=f.int(
                "hc_sinkhorn_iters", 20), eps=f.float("hc_eps", 1e-6, positive=True)),
        )

    def tensor_parts(self, name: str, shape: tuple[int, ...]) -> list[TensorPart]:
        conv = CONV_PARAM.match(name)
        if conv is None:
            return super().tensor_parts(name, shape)
        rows = shape[0]
        first = "qkv".index(conv["qkv"]) * rows
        fused = Stored(f"{conv['attn']}.conv1d.weight", (slice(first, first + rows),), (3 * rows, *shape[1:]))
        return [TensorPart((Stored(name), fused), shape)]

    def stored_names(self, name: str) -> tuple[str, ...]:
        hc = HC_PARAM.match(name)
        if hc is not None:
            return f"{hc['layer']}.hc_{hc['hc']}_{hc['w']}", name
        gate = FORGET_GATE.match(name)
        if gate is not None:
            return name, f"{gate['attn']}.forget_gate.{gate['w']}"
        return super().stored_names(name)


ADAPTER = Glm5Next()
