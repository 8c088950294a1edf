"""ModelConfig: the hybrid network's shape, read from a HF `config.json` (docs/models.md, "Reading `config.json`").

Accepts `model_type` kimi_linear (Kimi-Linear) and kimi_k3 (Kimi K3 / K3.1, fields under `text_config`), the
DeepSeek-style indexer fields (`index_n_heads`, `index_head_dim`, `index_topk`) or a `dsa_config` block, and the
field mirrors transformers writes (`layer_types`, `mlp_layer_types`, `linear_num_heads`, ...), which must agree
with the fields they mirror. Fields that do not change the computation (dropout, initializer range, ...) are
ignored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dayzero.errors import DayzeroError
from dayzero.model.fields import ConfigFields

MODEL_TYPES = ("kimi_linear", "kimi_k3")
KDA, MLA = "kda", "mla"
DENSE, MOE = "dense", "moe"


@dataclass(frozen=True)
class KDAConfig:
    num_heads: int
    head_dim: int
    conv_size: int = 4
    # K3: the output gate is one full-rank g_proj instead of g_a_proj/g_b_proj
    full_rank_output_gate: bool = False
    # K3: g = lower_bound * sigmoid(exp(A_log) * z) instead of -exp(A_log) * softplus(z)
    gate_lower_bound: float | None = None

    def __post_init__(self):
        if self.conv_size < 2:
            raise DayzeroError(f"linear_attn_config.short_conv_kernel_size must be >= 2, got {self.conv_size}")
        if self.gate_lower_bound is not None and self.gate_lower_bound >= 0:
            raise DayzeroError(f"linear_attn_config.gate_lower_bound must be negative, got {self.gate_lower_bound}")

    @property
    def proj_dim(self) -> int:
        return self.num_heads * self.head_dim


@dataclass(frozen=True)
class MLAConfig:
    num_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    use_nope: bool = True
    output_gate: bool = False
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_dim(self) -> int:
        """Width of one latent KV cache row: [c_kv | k_pe]."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class IndexerConfig:
    num_heads: int
    head_dim: int
    topk: int
    norm_eps: float = 1e-6


@dataclass(frozen=True)
class MoEConfig:
    num_experts: int
    top_k: int
    intermediate_size: int
    num_shared_experts: int = 0
    num_groups: int = 1
    topk_group: int = 1
    renormalize: bool = True
    scaling: float = 1.0
    router_activation: str = "sigmoid"
    # latent MoE (K3): experts run in a `latent_size` space entered by routed_expert_down_proj
    latent_size: int | None = None
    latent_norm: bool = True
    # expert parallelism (a rank's view, dayzero/dist/rank_plan.py): this many ranks share the routed experts (each
    # holds whole experts) and the shared experts' neurons
    expert_shards: int = 1
    # routed expert weights kept as the checkpoint stores them, MXFP4 (K3's release format; chosen at load time, see
    # model/expert_format.py), instead of dequantized to the model dtype
    mxfp4_experts: bool = False

    @property
    def local_experts(self) -> int:
        return self.num_experts // self.expert_shards

    @property
    def shared_size(self) -> int:
        return self.intermediate_size * self.num_shared_experts // self.expert_shards

    def __post_init__(self):
        if self.top_k > self.num_experts:
            raise DayzeroError(f"num_experts_per_token ({self.top_k}) exceeds num_experts ({self.num_experts})")
        if self.num_experts % self.num_groups:
            raise DayzeroError(f"num_experts ({self.num_experts}) is not divisible by num_expert_group "
                               f"({self.num_groups})")
        if self.topk_group > self.num_groups:
            raise DayzeroError(f"topk_group ({self.topk_group}) exceeds num_expert_group ({self.num_groups})")


@dataclass(frozen=True)
class ModelConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    layer_kinds: tuple[str, ...]
    mlp_kinds: tuple[str, ...]
    intermediate_size: int
    kda: KDAConfig | None
    mla: MLAConfig | None
    indexer: IndexerConfig | None
    moe: MoEConfig | None
    rms_norm_eps: float = 1e-5
    hidden_act: str = "silu"
    act_params: dict[str, float] = field(default_factory=dict)
    attn_res_block_size: int | None = None
    tie_word_embeddings: bool = False
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    max_position_embeddings: int = 1 << 20

    def __post_init__(self):
        if len(self.layer_kinds) != len(self.mlp_kinds):
            raise DayzeroError("layer_types and mlp_layer_types must have one entry per layer")
        if KDA in self.layer_kinds and self.kda is None:
            raise DayzeroError("config has KDA layers but no linear_attn_config")
        if MLA in self.layer_kinds and self.mla is None:
            raise DayzeroError("config has full-attention layers but no MLA fields (kv_lora_rank, ...)")
        if MOE in self.mlp_kinds and self.moe is None:
            raise DayzeroError("config has MoE layers but no num_experts")

    @property
    def num_layers(self) -> int:
        return len(self.layer_kinds)

    @classmethod
    def from_hf(cls, path: str | Path) -> ModelConfig:
        """Read `path` (a checkpoint directory or its config.json)."""
        path = Path(path)
        file = path / "config.json" if path.is_dir() else path
        try:
            data = json.loads(file.read_text())
        except FileNotFoundError:
            raise DayzeroError(f"no config.json at {file}; point dayzero at a HF checkpoint directory") from None
        except json.JSONDecodeError as err:
            raise DayzeroError(f"{file} is not valid JSON ({err.msg} at line {err.lineno} column {err.colno}); "
                               "fix or re-download it") from None
        return cls.from_dict(data, where=str(file))

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "config.json") -> ModelConfig:
        top = ConfigFields(data, where)
        model_type = top.str("model_type", choices=MODEL_TYPES)
        text = top.sub("text_config") or top
        return _parse_text_config(model_type, text)


def _parse_text_config(model_type: str, f: ConfigFields) -> ModelConfig:
    num_layers = f.int("num_hidden_layers")
    kda = _parse_kda(f)
    layer_kinds = _layer_kinds(f, num_layers)
    mlp_kinds = _mlp_kinds(f, num_layers)
    hidden_act = f.str("hidden_act", "silu", choices=("silu", "situ"))
    return ModelConfig(
        model_type=model_type,
        vocab_size=f.int("vocab_size"),
        hidden_size=f.int("hidden_size"),
        layer_kinds=layer_kinds,
        mlp_kinds=mlp_kinds,
        intermediate_size=_intermediate_size(f, mlp_kinds),
        kda=kda if KDA in layer_kinds else None,
        mla=_parse_mla(f) if MLA in layer_kinds else None,
        indexer=_parse_indexer(f),
        moe=_parse_moe(f) if MOE in mlp_kinds else None,
        rms_norm_eps=f.float("rms_norm_eps", 1e-5, positive=True),
        hidden_act=hidden_act,
        act_params=_act_params(f, hidden_act),
        attn_res_block_size=f.optional_int("attn_res_block_size"),
        tie_word_embeddings=f.bool("tie_word_embeddings", False),
        bos_token_id=f.int("bos_token_id", None, minimum=0),
        eos_token_id=_first_id(f, "eos_token_id"),
        max_position_embeddings=f.int("max_position_embeddings", 1 << 20, aliases=("model_max_length",)),
    )


def _intermediate_size(f: ConfigFields, mlp_kinds: tuple[str, ...]) -> int:
    """Required exactly when some layer has a dense MLP."""
    if DENSE in mlp_kinds:
        return f.int("intermediate_size")
    return f.int("intermediate_size", 0, minimum=0)


def _first_id(f: ConfigFields, name: str) -> int | None:
    value = f.data.get(name)
    if isinstance(value, list):
        value = value[0] if value else None
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise DayzeroError(f"{f.where}: field {name!r} must be a token id or a list of them, got {value!r}")
    return value


def _parse_kda(f: ConfigFields) -> KDAConfig | None:
    lin = f.sub("linear_attn_config")
    if lin is None:
        return None
    kda = KDAConfig(
        num_heads=lin.int("num_heads"),
        head_dim=lin.int("head_dim"),
        conv_size=lin.int("short_conv_kernel_size", 4),
        full_rank_output_gate=lin.bool("use_full_rank_gate", False),
        gate_lower_bound=lin.float("gate_lower_bound", None),
    )
    for mirror, value in (("linear_num_heads", kda.num_heads), ("linear_head_dim", kda.head_dim),
                          ("linear_conv_kernel_dim", kda.conv_size)):
        if f.has(mirror) and f.data[mirror] != value:
            raise DayzeroError(f"{f.where}: field {mirror!r} ({f.data[mirror]}) disagrees with linear_attn_config "
                               f"({value}); make them equal")
    return kda


def _layer_kinds(f: ConfigFields, num_layers: int) -> tuple[str, ...]:
    lin = f.sub("linear_attn_config")
    mirror = f.data.get("layer_types")
    if lin is None:
        if mirror is None:
            raise DayzeroError(f"{f.where}: required field 'linear_attn_config' is missing (it lists kda_layers "
                               "and full_attn_layers)")
        kinds = tuple(_layer_type_kind(f, t) for t in mirror)
    else:
        kinds = _kinds_from_lists(f, lin, num_layers)
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


def _kinds_from_lists(f: ConfigFields, lin: ConfigFields, num_layers: int) -> tuple[str, ...]:
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
    return tuple(KDA if i + 1 in kda_layers else MLA for i in range(num_layers))


def _mlp_kinds(f: ConfigFields, num_layers: int) -> tuple[str, ...]:
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


def _parse_mla(f: ConfigFields) -> MLAConfig:
    if f.has("rope_scaling") and f.data["rope_scaling"].get("type", f.data["rope_scaling"].get("rope_type")) not in (
            None, "default"):
        raise DayzeroError(f"{f.where}: rope_scaling {f.data['rope_scaling']!r} is not supported; dayzero applies "
                           "plain RoPE (or none with mla_use_nope)")
    return MLAConfig(
        num_heads=f.int("num_attention_heads"),
        q_lora_rank=f.optional_int("q_lora_rank"),
        kv_lora_rank=f.int("kv_lora_rank"),
        qk_nope_head_dim=f.int("qk_nope_head_dim"),
        qk_rope_head_dim=f.int("qk_rope_head_dim"),
        v_head_dim=f.int("v_head_dim"),
        use_nope=f.bool("mla_use_nope", True),
        output_gate=f.bool("mla_use_output_gate", False),
        rope_theta=f.float("rope_theta", 10000.0, positive=True),
    )


def _parse_indexer(f: ConfigFields) -> IndexerConfig | None:
    dsa = f.sub("dsa_config")
    if dsa is not None:
        return IndexerConfig(
            num_heads=dsa.int("index_n_heads", aliases=("num_heads", "n_heads")),
            head_dim=dsa.int("index_head_dim", aliases=("head_dim",)),
            topk=dsa.int("index_topk", aliases=("topk",)),
        )
    if not f.has("index_topk"):
        return None
    return IndexerConfig(num_heads=f.int("index_n_heads"), head_dim=f.int("index_head_dim"), topk=f.int("index_topk"))


def _parse_moe(f: ConfigFields) -> MoEConfig:
    return MoEConfig(
        num_experts=f.int("num_experts", aliases=("num_local_experts", "n_routed_experts")),
        top_k=f.int("num_experts_per_token", aliases=("num_experts_per_tok",)),
        intermediate_size=f.int("moe_intermediate_size"),
        num_shared_experts=f.int("num_shared_experts", 0, aliases=("n_shared_experts",), minimum=0),
        num_groups=f.int("num_expert_group", 1, aliases=("n_group",)),
        topk_group=f.int("topk_group", 1),
        renormalize=f.bool("moe_renormalize", True, aliases=("norm_topk_prob",)),
        scaling=f.float("routed_scaling_factor", 1.0, positive=True),
        router_activation=f.str("moe_router_activation_func", "sigmoid", choices=("sigmoid", "softmax")),
        latent_size=f.optional_int("routed_expert_hidden_size"),
        latent_norm=f.bool("latent_moe_use_norm", True),
    )


def _act_params(f: ConfigFields, hidden_act: str) -> dict[str, float]:
    if hidden_act != "situ":
        return {}
    params = {"beta": f.float("activation_situ_beta", 1.0, positive=True)}
    linear_beta = f.float("activation_situ_linear_beta", None, positive=True)
    if linear_beta is not None:
        params["linear_beta"] = linear_beta
    return params
