"""The least memory traffic one decode step moves, from the model config and the engine manifest: what `dayzero bench`
holds a measured decode step against (at the measured copy bandwidth, decode being bound by memory).

Per step of B sequences, each with C tokens in the cache:
* weights: every parameter read once, except the token embedding (B rows of it) and the routed experts; of each MoE
  layer's routed experts, the ones B tokens reach, estimated as E (1 - (1 - k/E)^B) distinct experts under uniform
  routing (a skewed router reaches fewer);
* KDA layers: each sequence's state slot (recurrent state + conv windows) read once and written 1 + num_draft times;
* MLA layers: each sequence's C latent rows; with a DSA indexer, its C index keys (pooled: a key a pool) and its
  picks' min(C, topk) latent rows (pooled: up to topk + kpool - 1), in a layer that shares picks too;
* GQA layers: each sequence's C K and V rows (every KV head).
Activations and logits are left out: at decode batch sizes they are small next to these.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dayzero.contract import SLOT, EngineManifest
from dayzero.export.sizing import parameter_bytes
from dayzero.model.config import ModelConfig
from dayzero.model.weights import parameter_shapes

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


def weight_read_share(cfg: ModelConfig, name: str, shape: torch.Size, num_tokens: int) -> float:
    """The share of parameter `name` a decode step of `num_tokens` tokens reads."""
    if name.startswith(EMBEDDING):
        return min(1.0, num_tokens / shape[0])
    if ROUTED_EXPERTS in name:
        return experts_reached(cfg.moe.num_experts, cfg.moe.top_k, num_tokens) / cfg.moe.num_experts
    return 1.0


def weight_bytes_by_name(cfg: ModelConfig, dtype: torch.dtype, num_tokens: int) -> dict[str, float]:
    """Per parameter: the bytes of it a decode step of `num_tokens` tokens reads."""
    return {name: parameter_bytes(name, shape, dtype) * weight_read_share(cfg, name, shape, num_tokens)
            for name, shape in parameter_shapes(cfg).items()}


def weight_bytes(cfg: ModelConfig, dtype: torch.dtype, num_tokens: int) -> float:
    return sum(weight_bytes_by_name(cfg, dtype, num_tokens).values())


def state_bytes_by_layer(manifest: EngineManifest, batch: int) -> dict[int, int]:
    """Per KDA layer: each sequence's slot read once and written 1 + num_draft times."""
    by_layer: dict[int, int] = {}
    for spec in manifest.cache_tensors:
        if spec.unit == SLOT:
            by_layer[spec.layer] = by_layer.get(spec.layer, 0) + batch * spec.unit_bytes * (2 + manifest.num_draft)
    return by_layer


def cache_bytes_by_tensor(cfg: ModelConfig, manifest: EngineManifest, context: int) -> dict[tuple[int, str], float]:
    """Per (MLA / GQA layer, paged tensor): the bytes one sequence with `context` cached tokens reads in a decode step
    (without a DSA indexer: every row of its paged tensors)."""
    per_token: dict[int, dict[str, float]] = {}
    for spec in manifest.cache_tensors:
        if spec.unit != SLOT:
            per_token.setdefault(spec.layer, {})[spec.name] = spec.unit_bytes / manifest.page_size
    by_tensor = {}
    # a sparse layer reads its picks' latent rows, whether it ran the indexer or shares an earlier layer's picks
    latent_rows = context if cfg.indexer is None else min(context, cfg.indexer.picks)
    for layer, row in per_token.items():
        for name, nbytes in row.items():
            by_tensor[layer, name] = nbytes * (latent_rows if name == "latent_kv" else context)
    return by_tensor


def cache_bytes_by_layer(cfg: ModelConfig, manifest: EngineManifest, context: int) -> dict[int, float]:
    """Per MLA / GQA layer: the paged-cache bytes one sequence with `context` cached tokens reads in a decode step."""
    by_layer: dict[int, float] = {}
    for (layer, _), nbytes in cache_bytes_by_tensor(cfg, manifest, context).items():
        by_layer[layer] = by_layer.get(layer, 0.0) + nbytes
    return by_layer


def cache_bytes_per_sequence(cfg: ModelConfig, manifest: EngineManifest, context: int) -> float:
    return sum(cache_bytes_by_layer(cfg, manifest, context).values())


def decode_traffic(cfg: ModelConfig, manifest: EngineManifest, batch: int, context: int) -> DecodeTraffic:
    """cfg: the network one rank runs (its local config under tensor parallelism)."""
    dtype = getattr(torch, manifest.dtype)
    state = sum(state_bytes_by_layer(manifest, batch).values())
    return DecodeTraffic(weight_bytes(cfg, dtype, batch * (1 + manifest.num_draft)), state,
                         batch * cache_bytes_per_sequence(cfg, manifest, context))
