"""Readers of the config.json sections the family shares (docs/models.md, "Reading `config.json`"): each turns the
HF fields of one part of the network into dayzero's description of it, and every problem into a DayzeroError that
names the field. Field mirrors that transformers writes (`layer_types`, `mlp_layer_types`, `linear_num_heads`, ...)
must agree with the fields they mirror. Fields that do not change the computation are not read.
"""

from __future__ import annotations

from typing import Any

from dayzero.errors import DayzeroError
from dayzero.model.fields import ConfigFields
from dayzero.model.layer_config import (
    DENSE,
    KDA,
    MLA,
    MOE,
    IndexerConfig,
    KDAConfig,
    MLAConfig,
    MoEConfig,
    YarnScaling,
)
from dayzero.model.limits import MAX_EXPERTS, MAX_HIDDEN_SIZE, MAX_LAYERS, MAX_POSITIONS, MAX_VOCAB_SIZE

HIDDEN_ACTS = ("silu", "situ")


def common(f: ConfigFields) -> dict[str, Any]:
    """The fields every architecture has: sizes, norms, token ids."""
    hidden_act = f.str("hidden_act", "silu", choices=HIDDEN_ACTS)
    return dict(
        vocab_size=f.int("vocab_size", maximum=MAX_VOCAB_SIZE),
        hidden_size=f.int("hidden_size", maximum=MAX_HIDDEN_SIZE),
        rms_norm_eps=f.float("rms_norm_eps", 1e-5, positive=True),
        hidden_act=hidden_act,
        act_params=act_params(f, hidden_act),
        tie_word_embeddings=f.bool("tie_word_embeddings", False),
        bos_token_id=f.int("bos_token_id", None, minimum=0),
        eos_token_id=first_id(f, "eos_token_id"),
        max_position_embeddings=f.int("max_position_embeddings", 1 << 20, aliases=("model_max_length",),
                                      maximum=MAX_POSITIONS),
        num_mtp_layers=f.int("num_nextn_predict_layers", 0, minimum=0, maximum=MAX_LAYERS),
    )


def num_layers(f: ConfigFields) -> int:
    return f.int("num_hidden_layers", maximum=MAX_LAYERS)


def feed_forward(f: ConfigFields, num_layers: int) -> dict[str, Any]:
    """mlp_kinds, intermediate_size and moe."""
    kinds = mlp_kinds(f, num_layers)
    return dict(mlp_kinds=kinds, intermediate_size=intermediate_size(f, kinds), moe=moe(f) if MOE in kinds else None)


def intermediate_size(f: ConfigFields, kinds: tuple[str, ...]) -> int:
    """Required exactly when some layer has a dense MLP."""
    if DENSE in kinds:
        return f.int("intermediate_size")
    return f.int("intermediate_size", 0, minimum=0)


def first_id(f: ConfigFields, name: str) -> int | None:
    value = f.data.get(name)
    if isinstance(value, list):
        value = value[0] if value else None
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise DayzeroError(f"{f.where}: field {name!r} must be a token id or a list of them, got {value!r}")
    return value


def refuse_true(f: ConfigFields, *names: str) -> None:
    """Flags dayzero's layers do not have (projection biases, ...)."""
    for name in names:
        if f.bool(name, False):
            raise DayzeroError(f"{f.where}: field {name!r} is true; dayzero's projections have no bias")


def kda(f: ConfigFields) -> KDAConfig | None:
    lin = f.sub("linear_attn_config")
    if lin is None:
        return None
    config = KDAConfig(
        num_heads=lin.int("num_heads"),
        head_dim=lin.int("head_dim"),
        conv_size=lin.int("short_conv_kernel_size", 4),
        full_rank_output_gate=lin.bool("use_full_rank_gate", False),
        gate_lower_bound=lin.float("gate_lower_bound", None),
    )
    for mirror, value in (("linear_num_heads", config.num_heads), ("linear_head_dim", config.head_dim),
                          ("linear_conv_kernel_dim", config.conv_size)):
        if f.has(mirror) and f.data[mirror] != value:
            raise DayzeroError(f"{f.where}: field {mirror!r} ({f.data[mirror]}) disagrees with linear_attn_config "
                               f"({value}); make them equal")
    return config


def hybrid_layer_kinds(f: ConfigFields, num_layers: int) -> tuple[str, ...]:
    """KDA / MLA per layer from linear_attn_config's lists, or from `layer_types` alone."""
    lin = f.sub("linear_attn_config")
    mirror = f.data.get("layer_types")
    if lin is None:
        if mirror is None:
            raise DayzeroError(f"{f.where}: required field 'linear_attn_config' is missing (it lists kda_layers "
                               "and full_attn_layers)")
        kinds = tuple(_layer_type_kind(f, t) for t in mirror)
    else:
        kinds = _kinds_from_lists(lin, num_layers)
        if mirror is not None and tuple(_layer_type_kind(f, t) for t in mirror) != kinds:
            raise DayzeroError(f"{f.where}: field 'layer_types' disagrees with linear_attn_config.kda_layers / "
                               "full_attn_layers; fix one of them")
    if len(kinds) != num_layers:
        raise DayzeroError(f"{f.where}: field 'layer_types' has {len(kinds)} entries for {num_layers} layers")
    return kinds


def _layer_type_kind(f: ConfigFields, layer_type: Any) -> str:
    kinds = {"linear_attention": KDA, "full_attention": MLA}
    if layer_type not in kinds:
        raise DayzeroError(f"{f.where}: field 'layer_types' holds {layer_type!r}; expected linear_attention or "
                           "full_attention")
    return kinds[layer_type]


def _kinds_from_lists(lin: ConfigFields, num_layers: int) -> tuple[str, ...]:
    """The lists are 1-indexed: zero-based layer i is KDA iff i+1 is in kda_layers."""
    kda_layers = set(lin.int_list("kda_layers"))
    full_layers = set(lin.int_list("full_attn_layers", []))
    every = set(range(1, num_layers + 1))
    if kda_layers & full_layers:
        raise DayzeroError(f"{lin.where}: layers {sorted(kda_layers & full_layers)} are in both kda_layers and "
                           "full_attn_layers")
    stray = (kda_layers | full_layers) - every
    if stray:
        raise DayzeroError(f"{lin.where}: layers {sorted(stray)} are outside 1..num_hidden_layers ({num_layers}); "
                           "the lists are 1-indexed")
    unlisted = sorted(every - kda_layers - full_layers)
    if unlisted:
        raise DayzeroError(f"{lin.where}: layers {_spelled(unlisted)} of num_hidden_layers ({num_layers}) are in "
                           "neither kda_layers nor full_attn_layers; list every layer (1-indexed) in one of them")
    return tuple(KDA if i + 1 in kda_layers else MLA for i in range(num_layers))


def _spelled(layers: list[int]) -> str:
    return str(layers) if len(layers) <= 8 else f"{layers[:8]}"[:-1] + f", ... ({len(layers)} in all)]"


def attention_layer_kinds(f: ConfigFields, num_layers: int, layer_types: tuple[str, ...]) -> tuple[str, ...]:
    """Every layer MLA; a `layer_types` mirror may only hold the names in `layer_types`."""
    mirror = f.data.get("layer_types")
    if mirror is not None and (len(mirror) != num_layers or any(t not in layer_types for t in mirror)):
        raise DayzeroError(f"{f.where}: field 'layer_types' must list {num_layers} of "
                           f"{', '.join(map(repr, layer_types))}, got {mirror!r}")
    return (MLA,) * num_layers


def mlp_kinds(f: ConfigFields, num_layers: int) -> tuple[str, ...]:
    if not f.has("num_experts") and not f.has("num_local_experts") and not f.has("n_routed_experts"):
        kinds = (DENSE,) * num_layers
    else:
        first_dense = f.int("first_k_dense_replace", 0, minimum=0)
        freq = f.int("moe_layer_freq", 1)
        kinds = tuple(MOE if i >= first_dense and i % freq == 0 else DENSE for i in range(num_layers))
    mirror = f.data.get("mlp_layer_types")
    if mirror is not None:
        names = {"dense": DENSE, "sparse": MOE}
        if any(m not in names for m in mirror) or tuple(names[m] for m in mirror) != kinds:
            raise DayzeroError(f"{f.where}: field 'mlp_layer_types' disagrees with first_k_dense_replace / "
                               "moe_layer_freq; fix one of them")
    return kinds


def rope_theta(f: ConfigFields) -> float:
    """`rope_theta`, or `rope_parameters.rope_theta` (as transformers writes it)."""
    params = f.sub("rope_parameters")
    if params is not None and params.has("rope_theta"):
        return params.float("rope_theta", positive=True)
    return f.float("rope_theta", 10000.0, positive=True)


def rope_scaling(f: ConfigFields) -> YarnScaling | None:
    """`rope_scaling` (or `rope_parameters`): none, or YaRN; other kinds are refused."""
    s = f.sub("rope_scaling") or f.sub("rope_parameters")
    if s is None:
        return None
    kind = s.data.get("type", s.data.get("rope_type", "default"))
    if kind in (None, "default"):
        return None
    if kind != "yarn":
        raise DayzeroError(f"{s.where}: RoPE type {kind!r} is not supported; dayzero applies plain RoPE, YaRN, or "
                           "none (mla_use_nope)")
    return YarnScaling(
        factor=s.float("factor", positive=True),
        original_max_position_embeddings=s.int("original_max_position_embeddings", maximum=MAX_POSITIONS),
        beta_fast=s.float("beta_fast", 32.0, positive=True),
        beta_slow=s.float("beta_slow", 1.0, positive=True),
        mscale=s.float("mscale", 0.0),
        mscale_all_dim=s.float("mscale_all_dim", 0.0),
        attention_factor=s.float("attention_factor", None, positive=True),
        truncate=s.bool("truncate", True),
    )


def mla(f: ConfigFields, use_nope: bool = True, rope_interleaved: bool = False) -> MLAConfig:
    """MLA; `use_nope` and `rope_interleaved` are the architecture's defaults (Kimi: NoPE; DeepSeek: RoPE on
    interleaved pairs)."""
    return MLAConfig(
        num_heads=f.int("num_attention_heads"),
        q_lora_rank=f.optional_int("q_lora_rank"),
        kv_lora_rank=f.int("kv_lora_rank"),
        qk_nope_head_dim=f.int("qk_nope_head_dim"),
        qk_rope_head_dim=f.int("qk_rope_head_dim"),
        v_head_dim=f.int("v_head_dim"),
        use_nope=f.bool("mla_use_nope", use_nope),
        output_gate=f.bool("mla_use_output_gate", False),
        rope_theta=rope_theta(f),
        rope_interleaved=rope_interleaved,
        rope_scaling=rope_scaling(f),
    )


def indexer(f: ConfigFields, rope_dim: int = 0, rope_interleaved: bool = False) -> IndexerConfig | None:
    """The DSA indexer from DeepSeek's fields (`index_n_heads`, `index_head_dim`, `index_topk`) or a `dsa_config`
    block; None without either."""
    dsa = f.sub("dsa_config")
    if dsa is not None:
        return IndexerConfig(
            num_heads=dsa.int("index_n_heads", aliases=("num_heads", "n_heads")),
            head_dim=dsa.int("index_head_dim", aliases=("head_dim",)),
            topk=dsa.int("index_topk", aliases=("topk",)),
            rope_dim=rope_dim,
            rope_interleaved=rope_interleaved,
        )
    if not f.has("index_topk"):
        return None
    return IndexerConfig(num_heads=f.int("index_n_heads"), head_dim=f.int("index_head_dim"), topk=f.int("index_topk"),
                         rope_dim=rope_dim, rope_interleaved=rope_interleaved)


def moe(f: ConfigFields) -> MoEConfig:
    # Kimi's name for the router's activation, then DeepSeek's
    spelled = "moe_router_activation_func" if f.has("moe_router_activation_func") else "scoring_func"
    activation = f.str(spelled, "sigmoid", choices=("sigmoid", "softmax"))
    return MoEConfig(
        num_experts=f.int("num_experts", aliases=("num_local_experts", "n_routed_experts"), maximum=MAX_EXPERTS),
        top_k=f.int("num_experts_per_token", aliases=("num_experts_per_tok",)),
        intermediate_size=f.int("moe_intermediate_size"),
        num_shared_experts=f.int("num_shared_experts", 0, aliases=("n_shared_experts",), minimum=0,
                                 maximum=MAX_EXPERTS),
        num_groups=f.int("num_expert_group", 1, aliases=("n_group",)),
        topk_group=f.int("topk_group", 1),
        renormalize=f.bool("moe_renormalize", True, aliases=("norm_topk_prob",)),
        scaling=f.float("routed_scaling_factor", 1.0, positive=True),
        router_activation=activation,
        latent_size=f.optional_int("routed_expert_hidden_size"),
        latent_norm=f.bool("latent_moe_use_norm", True),
    )


def act_params(f: ConfigFields, hidden_act: str) -> dict[str, float]:
    if hidden_act != "situ":
        return {}
    params = {"beta": f.float("activation_situ_beta", 1.0, positive=True)}
    linear_beta = f.float("activation_situ_linear_beta", None, positive=True)
    if linear_beta is not None:
        params["linear_beta"] = linear_beta
    return params
