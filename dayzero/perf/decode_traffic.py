"""The least memory traffic one decode step moves, from the model config and the engine manifest: what `dayzero bench`
holds a measured decode step against (at the measured copy bandwidth, decode being bound by memory).

Per step of B sequences, each with C tokens in the cache:
* weights: every parameter read once, except the token embedding (B rows of it) and the routed experts; of each MoE
  layer's routed experts, the ones B tokens reach, estimated as E (1 - (1 - k/E)^B) distinct experts under uniform
  routing (a skewed router reaches fewer);
* KDA layers: each sequence's state slot (recurrent state + conv windows) read once and written 1 + num_draft times;
* MLA layers: each sequence's C latent rows; with a DSA indexer, its C index keys and min(C, topk) latent rows.
Activations and logits are left out: at decode batch sizes they are small next to these.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dayzero.contract import SLOT, EngineManifest
from dayzero.model.config import ModelConfig
from dayzero.model.weights import param_dtype, parameter_shapes

ROUTED_EXPERTS = ".block_sparse_moe.experts."
EMBEDDING = "model.embed_tokens."


@dataclass(frozen=True)
class DecodeTraffic:
    weight_bytes: float
    state_bytes: float
    cache_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weight_bytes + self.state_bytes + self.cache_bytes

    def seconds(self, bytes_per_s: float) -> float:
        return self.total_bytes / bytes_per_s


def experts_reached(num_experts: int, top_k: int, num_tokens: int) -> float:
    """Expected distinct experts num_tokens tokens pick, each top_k of num_experts uniformly."""
    return num_experts * (1 - (1 - top_k / num_experts) ** num_tokens)


def weight_bytes(cfg: ModelConfig, dtype: torch.dtype, num_tokens: int) -> float:
    total = 0.0
    reached = experts_reached(cfg.moe.num_experts, cfg.moe.top_k, num_tokens) / cfg.moe.num_experts if cfg.moe else 1
    for name, shape in parameter_shapes(cfg).items():
        nbytes = shape.numel() * param_dtype(name, dtype).itemsize
        if name.startswith(EMBEDDING):
            nbytes *= min(1.0, num_tokens / shape[0])
        elif ROUTED_EXPERTS in name:
            nbytes *= reached
        total += nbytes
    return total


def cache_bytes_per_sequence(cfg: ModelConfig, manifest: EngineManifest, context: int) -> float:
    by_layer: dict[int, dict[str, float]] = {}
    for spec in manifest.cache_tensors:
        if spec.unit != SLOT:
            by_layer.setdefault(spec.layer, {})[spec.name] = spec.unit_bytes / manifest.page_size
    total = 0.0
    for per_token in by_layer.values():
        if "index_k" in per_token:
            total += context * per_token["index_k"] + min(context, cfg.indexer.topk) * per_token["latent_kv"]
        else:
            total += context * per_token.get("latent_kv", 0.0)
    return total


def decode_traffic(cfg: ModelConfig, manifest: EngineManifest, batch: int, context: int) -> DecodeTraffic:
    """cfg: the network one rank runs (its local config under tensor parallelism)."""
    dtype = getattr(torch, manifest.dtype)
    state = batch * manifest.unit_bytes(SLOT) * (2 + manifest.num_draft)
    return DecodeTraffic(weight_bytes(cfg, dtype, batch * (1 + manifest.num_draft)), state,
                         batch * cache_bytes_per_sequence(cfg, manifest, context))
