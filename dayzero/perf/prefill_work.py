"""The arithmetic a prefill must do, from the model config: what `dayzero bench` holds measured prefill throughput
against (at the device's measured matmul rate, prefill being bound by compute).

Per prompt token: 2 x its active weights (every parameter but the embedding, with top_k of each MoE layer's E routed
experts; an MXFP4 byte holds two weights) for the projections; per MLA layer, absorbed attention over the keys it
sees (its causal prefix, at most top-k of them with a DSA indexer: 2 x heads x (latent + rope + latent) per key) and
the indexer's scores over the whole prefix (2 x index heads x index dim per key); per GQA layer, attention over the
causal prefix (2 x query heads x 2 head_dim per key: scores and values). The KDA recurrences
(O(heads x K x V) per token) are left out.
"""

from __future__ import annotations

import torch

from dayzero.export.sizing import model_parameters
from dayzero.model.config import GQA, MLA, ModelConfig
from dayzero.model.weights import parameter_shapes
from dayzero.perf.decode_traffic import EMBEDDING, ROUTED_EXPERTS


def active_weights(cfg: ModelConfig, name: str, shape: torch.Size) -> float:
    """The weights of parameter `name` one prompt token multiplies with."""
    if name.startswith(EMBEDDING):
        return 0.0
    share = cfg.moe.top_k / cfg.moe.num_experts if ROUTED_EXPERTS in name else 1.0
    return model_parameters(name, shape) * share


def active_weights_per_token(cfg: ModelConfig) -> float:
    return sum(active_weights(cfg, name, shape) for name, shape in parameter_shapes(cfg).items())


def weight_flops(cfg: ModelConfig, name: str, shape: torch.Size) -> float:
    """What one prompt token does with parameter `name`: a multiply and an add per active weight."""
    return 2 * active_weights(cfg, name, shape)


def _keys_seen(prompt_tokens: int, cap: int | None) -> float:
    """Sum over positions p < prompt_tokens of min(p + 1, cap)."""
    if cap is None or cap >= prompt_tokens:
        return prompt_tokens * (prompt_tokens + 1) / 2
    return cap * (cap + 1) / 2 + (prompt_tokens - cap) * cap


def attention_flops(cfg: ModelConfig, layer: int, prompt_tokens: int) -> float:
    """Layer `layer`'s attention and indexer work over one prompt (none in a KDA layer)."""
    if cfg.layer_kinds[layer] == GQA:
        return 2 * cfg.gqa.num_heads * 2 * cfg.gqa.head_dim * _keys_seen(prompt_tokens, None)
    if cfg.layer_kinds[layer] != MLA or cfg.mla is None:
        return 0.0
    width = cfg.mla.latent_dim + cfg.mla.kv_lora_rank
    topk = cfg.indexer.topk if cfg.indexer else None
    flops = 2 * cfg.mla.num_heads * width * _keys_seen(prompt_tokens, topk)
    if cfg.indexer:
        flops += 2 * cfg.indexer.num_heads * cfg.indexer.head_dim * _keys_seen(prompt_tokens, None)
    return flops


def prefill_flops(cfg: ModelConfig, prompt_tokens: int) -> float:
    """Floating-point operations of one prompt of `prompt_tokens` tokens."""
    flops = prompt_tokens * sum(weight_flops(cfg, name, shape) for name, shape in parameter_shapes(cfg).items())
    return flops + sum(attention_flops(cfg, layer, prompt_tokens) for layer in range(cfg.num_layers))
