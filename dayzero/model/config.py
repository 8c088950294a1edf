"""ModelConfig: the network's per-layer description (which token mixer, residual and feed-forward each layer has, and
their shapes), read from a HF `config.json` by the adapter of its `model_type` (adapters/; docs/models.md,
"Reading `config.json`").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dayzero.errors import DayzeroError
from dayzero.model.adapters import adapter_for
from dayzero.model.fields import ConfigFields
from dayzero.model.layer_config import (
    DENSE,
    GDN,
    GQA,
    KDA,
    MLA,
    MOE,
    GDNConfig,
    GQAConfig,
    HyperConnectionConfig,
    IndexerConfig,
    KDAConfig,
    MLAConfig,
    MoEConfig,
    YarnScaling,
)

__all__ = ["DENSE", "GDN", "GQA", "KDA", "MLA", "MOE", "GDNConfig", "GQAConfig", "HyperConnectionConfig",
           "IndexerConfig", "KDAConfig", "MLAConfig", "ModelConfig", "MoEConfig", "YarnScaling"]


@dataclass(frozen=True)
class ModelConfig:
    """Per layer: the token mixer (`layer_kinds`: KDA, gated DeltaNet, MLA or GQA; MLA with the DSA `indexer` when
    there is one), the residual (plain, block attention residuals with `attn_res_block_size`, or
    `hyper_connections`) and the feed-forward (`mlp_kinds`: dense, or MoE routed as `moe` says); then the shapes of
    each kind."""

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
    # multi-token-prediction layers stored after the last layer (DeepSeek's `num_nextn_predict_layers`): not run
    num_mtp_layers: int = 0
    # MLA layers without an indexer of their own that attend over the Top-K of the closest earlier layer with one
    # (GLM's IndexShare)
    index_shared_layers: tuple[int, ...] = ()
    # the gated grouped-query attention layers' shapes (Qwen3-Next's full attention)
    gqa: GQAConfig | None = None
    # gated DeltaNet layers (Qwen3-Next)
    gdn: GDNConfig | None = None
    # the decoder's RMSNorms scale by (1 + weight) (Qwen3-Next), not by weight
    zero_centered_norm: bool = False
    # hyper-connections (GLM-5.3) in place of the residual add
    hyper_connections: HyperConnectionConfig | None = None
    # parts of the checkpoint dayzero does not run (a multimodal checkpoint's vision tower), one line each, said in
    # the load log and by `dayzero inspect`
    ignored_parts: tuple[str, ...] = ()

    def __post_init__(self):
        if len(self.layer_kinds) != len(self.mlp_kinds):
            raise DayzeroError("layer_types and mlp_layer_types must have one entry per layer")
        if KDA in self.layer_kinds and self.kda is None:
            raise DayzeroError("config has KDA layers but no linear_attn_config")
        if GDN in self.layer_kinds and self.gdn is None:
            raise DayzeroError("config has gated DeltaNet layers but no linear_num_key_heads / linear_* fields")
        if MLA in self.layer_kinds and self.mla is None:
            raise DayzeroError("config has full-attention layers but no MLA fields (kv_lora_rank, ...)")
        if GQA in self.layer_kinds and self.gqa is None:
            raise DayzeroError("config has gated-attention layers but no GQA fields (num_key_value_heads, head_dim)")
        if self.hyper_connections is not None and self.attn_res_block_size is not None:
            raise DayzeroError("config has both hyper-connections (hc_mult) and attention residuals")
        if MOE in self.mlp_kinds and self.moe is None:
            raise DayzeroError("config has MoE layers but no num_experts")
        for layer in self.index_shared_layers:
            if not 0 <= layer < self.num_layers or self.layer_kinds[layer] != MLA or \
                    not any(self.owns_indexer(earlier) for earlier in range(layer)):
                raise DayzeroError(f"layer {layer} reuses an earlier layer's Top-K, but it is not an MLA layer after "
                                   "one with an indexer")

    @property
    def num_layers(self) -> int:
        return len(self.layer_kinds)

    def owns_indexer(self, layer: int) -> bool:
        """Whether `layer` runs a DSA indexer (and keeps its index keys)."""
        return self.indexer is not None and self.layer_kinds[layer] == MLA and layer not in self.index_shared_layers

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
        """Read a parsed config.json through the adapter of its `model_type`."""
        top = ConfigFields(data, where)
        adapter = adapter_for(top.str("model_type"), where)
        return cls(model_type=adapter.model_type, **adapter.describe(adapter.text_fields(top)),
                   ignored_parts=adapter.ignored_parts(top))
