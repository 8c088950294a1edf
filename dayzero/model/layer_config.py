"""The configs of dayzero's layer kinds: token mixers (KDA, gated DeltaNet, MLA with its RoPE and optional DSA
indexer, gated GQA) and the MoE feed-forward. `ModelConfig` (config.py) says which kind each layer is; an architecture
adapter (adapters/) fills these from a HF `config.json`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dayzero.errors import DayzeroError

KDA, MLA = "kda", "mla"
GDN = "gdn"
GQA = "gqa"
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
class GDNConfig:
    """Gated DeltaNet (Qwen3-Next's linear attention): `num_key_heads` query / key heads of `key_head_dim`, each
    shared by `num_value_heads / num_key_heads` consecutive value heads of `value_head_dim`; one decay per value
    head; one short conv of width `conv_size` over the concatenated q, k, v."""

    num_key_heads: int
    num_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_size: int = 4

    def __post_init__(self):
        if self.num_value_heads % self.num_key_heads:
            raise DayzeroError(f"linear_num_value_heads ({self.num_value_heads}) must be a multiple of "
                               f"linear_num_key_heads ({self.num_key_heads})")
        if self.conv_size < 2:
            raise DayzeroError(f"linear_conv_kernel_dim must be >= 2, got {self.conv_size}")

    @property
    def key_dim(self) -> int:
        return self.num_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.num_value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the short conv: q, k and v side by side."""
        return 2 * self.key_dim + self.value_dim

    @property
    def heads_per_key(self) -> int:
        return self.num_value_heads // self.num_key_heads


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature `0.1 * mscale * ln(factor) + 1` (1 without extension)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


@dataclass(frozen=True)
class YarnScaling:
    """YaRN RoPE extension (`rope_scaling` of type yarn, DeepSeek's long context; docs/models.md, "RoPE").

    `mscale` / `mscale_all_dim` of 0 mean "not given", as in the released configs' readers."""

    factor: float
    original_max_position_embeddings: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float = 0.0
    mscale_all_dim: float = 0.0
    attention_factor: float | None = None
    truncate: bool = True

    def __post_init__(self):
        if self.factor <= 0 or self.original_max_position_embeddings < 1:
            raise DayzeroError(f"rope_scaling: factor ({self.factor}) and original_max_position_embeddings "
                               f"({self.original_max_position_embeddings}) must be positive")

    @property
    def cos_sin_factor(self) -> float:
        """What cos and sin are multiplied by (so q_pe . k_pe by its square)."""
        if self.attention_factor is not None:
            return self.attention_factor
        if self.mscale and self.mscale_all_dim:
            return yarn_mscale(self.factor, self.mscale) / yarn_mscale(self.factor, self.mscale_all_dim)
        return yarn_mscale(self.factor)

    @property
    def softmax_factor(self) -> float:
        """What the MLA softmax scale is multiplied by (over every dim, rotated or not)."""
        return yarn_mscale(self.factor, self.mscale_all_dim) ** 2 if self.mscale_all_dim else 1.0


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
    # DeepSeek's layout: the rope dims are rotated in pairs (x0, x1), (x2, x3), ... instead of halves
    rope_interleaved: bool = False
    rope_scaling: YarnScaling | None = None

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent_dim(self) -> int:
        """Width of one latent KV cache row: [c_kv | k_pe]."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def softmax_scale(self) -> float:
        scale = self.qk_head_dim ** -0.5
        return scale if self.rope_scaling is None else scale * self.rope_scaling.softmax_factor


@dataclass(frozen=True)
class GQAConfig:
    """Grouped-query attention with per-head q / k RMSNorms, RoPE on the first `rotary_dim` dims (halves rotated
    together) and, with `output_gate`, a sigmoid gate per output element that q_proj emits beside each head's query
    (Qwen3-Next's full-attention layers; docs/ops.md, "Grouped-query attention")."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    rotary_dim: int
    rope_theta: float = 10000.0
    output_gate: bool = True
    # the norms' stored weight w scales by (1 + w) (Qwen3-Next)
    zero_centered_norm: bool = True
    norm_eps: float = 1e-6

    def __post_init__(self):
        if min(self.num_heads, self.num_kv_heads, self.head_dim) < 1 or self.num_heads % self.num_kv_heads:
            raise DayzeroError(f"num_attention_heads ({self.num_heads}) must be a positive multiple of "
                               f"num_key_value_heads ({self.num_kv_heads}), head_dim ({self.head_dim}) positive")
        if not 0 < self.rotary_dim <= self.head_dim or self.rotary_dim % 2:
            raise DayzeroError(f"the rotary width ({self.rotary_dim} = head_dim * partial_rotary_factor) must be even "
                               f"and within head_dim ({self.head_dim})")

    @property
    def softmax_scale(self) -> float:
        return self.head_dim ** -0.5


@dataclass(frozen=True)
class IndexerConfig:
    num_heads: int
    head_dim: int
    topk: int
    norm_eps: float = 1e-6
    # DeepSeek-V3.2 / GLM-5: RoPE (the MLA's frequencies) on the first `rope_dim` dims of the index query and key;
    # 0: none (K3.1)
    rope_dim: int = 0
    rope_interleaved: bool = False
    # GLM-5.3: the keys are cached and scored in pools of `kpool` consecutive tokens (one gated, position-weighted
    # mean a pool); the top `topk / kpool` pools are kept, and the sequence's unfinished pool always (1: no pools)
    kpool: int = 1

    def __post_init__(self):
        if self.rope_dim > self.head_dim or self.rope_dim % 2:
            raise DayzeroError(f"the indexer's RoPE width ({self.rope_dim}) must be even and at most index_head_dim "
                               f"({self.head_dim})")
        if self.kpool < 1 or self.topk % self.kpool:
            raise DayzeroError(f"index_topk ({self.topk}) must be a multiple of index_kpool ({self.kpool})")

    @property
    def pooled(self) -> bool:
        return self.kpool > 1

    @property
    def picks(self) -> int:
        """Width of a row of picks: the Top-K, and with pools the unfinished pool's up to kpool - 1 tokens."""
        return self.topk + self.kpool - 1


@dataclass(frozen=True)
class HyperConnectionConfig:
    """Manifold-constrained hyper-connections (GLM-5.3): `mult` residual streams a token, each sublayer's stream
    mix made doubly stochastic by `sinkhorn_iters` Sinkhorn steps with floor `eps`."""

    mult: int
    sinkhorn_iters: int
    eps: float = 1e-6

    def __post_init__(self):
        if self.mult < 1 or self.sinkhorn_iters < 1:
            raise DayzeroError(f"hc_mult ({self.mult}) and hc_sinkhorn_iters ({self.sinkhorn_iters}) must be positive")


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
    # expert parallelism (a rank's view, export/rank_plan.py): this many ranks share the routed experts (each
    # holds whole experts) and the shared experts' neurons
    expert_shards: int = 1
    # routed expert weights kept as the checkpoint stores them, MXFP4 (K3's release format; chosen at load time, see
    # model/expert_format.py), instead of dequantized to the model dtype
    mxfp4_experts: bool = False
    # the router adds a per-expert correction bias to the scores it ranks by (Kimi, DeepSeek; Qwen3-Next: none)
    router_bias: bool = True
    # Qwen3-Next: the shared expert's own width, and its output scaled by sigmoid(shared_expert_gate(x)) [1]
    shared_intermediate_size: int | None = None
    shared_expert_gate: bool = False

    @property
    def local_experts(self) -> int:
        return self.num_experts // self.expert_shards

    @property
    def shared_size(self) -> int:
        width = self.shared_intermediate_size or self.intermediate_size * self.num_shared_experts
        return width // self.expert_shards

    @property
    def shared_expert_like_routed(self) -> bool:
        """A plain shared expert (ungated, no latent space) of the routed experts' size: at decode it can run as one
        more expert of their grouped GEMMs (model/moe.py)."""
        return bool(self.num_shared_experts and not self.shared_expert_gate and self.latent_size is None
                    and self.shared_size == self.intermediate_size)

    def __post_init__(self):
        if self.top_k > self.num_experts:
            raise DayzeroError(f"num_experts_per_token ({self.top_k}) exceeds num_experts ({self.num_experts})")
        if self.num_experts % self.num_groups:
            raise DayzeroError(f"num_experts ({self.num_experts}) is not divisible by num_expert_group "
                               f"({self.num_groups})")
        if self.topk_group > self.num_groups:
            raise DayzeroError(f"topk_group ({self.topk_group}) exceeds num_expert_group ({self.num_groups})")
