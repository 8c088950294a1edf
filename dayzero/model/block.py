"""One decoder layer: token mixer (KDA, gated DeltaNet, MLA or gated GQA) and feed-forward (dense MLP or MoE), each
pre-normed (the stream applies `input_layernorm` and `post_attention_layernorm`, residual.py)."""

from __future__ import annotations

import torch
from torch import nn

from dayzero.contract import StepMeta
from dayzero.model.config import DENSE, GDN, GQA, KDA, ModelConfig
from dayzero.model.gated_attention import GatedAttention
from dayzero.model.gated_deltanet import GatedDeltaNet
from dayzero.model.hyper_connections import HyperConnection
from dayzero.model.kda import KDAttention
from dayzero.model.mla import MLAttention
from dayzero.model.mlp import GatedMLP
from dayzero.model.moe import MoE
from dayzero.model.norm import rms_norm
from dayzero.model.residual import mix_params
from dayzero.model.zigzag import ContextShard


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, index: int):
        super().__init__()
        self.index = index
        self.kind = cfg.layer_kinds[index]
        D, eps = cfg.hidden_size, cfg.rms_norm_eps
        self.input_layernorm = rms_norm(D, eps, cfg.zero_centered_norm)
        self.post_attention_layernorm = rms_norm(D, eps, cfg.zero_centered_norm)
        if self.kind == KDA:
            self.self_attn = KDAttention(D, cfg.kda, eps)
        elif self.kind == GDN:
            self.self_attn = GatedDeltaNet(D, cfg.gdn, eps)
        elif self.kind == GQA:
            self.self_attn = GatedAttention(D, cfg.gqa)
        else:
            self.self_attn = MLAttention(D, cfg.mla, cfg.indexer, shares_picks=index in cfg.index_shared_layers)
        if cfg.mlp_kinds[index] == DENSE:
            self.mlp = GatedMLP(D, cfg.intermediate_size, cfg.hidden_act, cfg.act_params)
        else:
            self.block_sparse_moe = MoE(D, cfg.moe, eps, cfg.hidden_act, cfg.act_params)
        if cfg.attn_res_block_size is not None:
            self.self_attention_res_norm, self.self_attention_res_proj = mix_params(D, eps)
            self.mlp_res_norm, self.mlp_res_proj = mix_params(D, eps)
        if cfg.hyper_connections is not None:
            hc = cfg.hyper_connections
            self.attn_hc, self.ffn_hc = (HyperConnection(hc.mult, D, hc.sinkhorn_iters, hc.eps, eps) for _ in range(2))

    def ffn(self, x: torch.Tensor, decode: bool = False) -> torch.Tensor:
        return self.mlp(x) if hasattr(self, "mlp") else self.block_sparse_moe(x, decode)

    def forward(self, stream, meta: StepMeta, cache, decode: bool, shard: ContextShard | None = None,
                picks: torch.Tensor | None = None) -> torch.Tensor | None:
        """Adds the layer's token mixer and feed-forward to the stream; -> the latest DSA Top-K picks (this layer's,
        or `picks` passed on), which a later layer may share."""
        x = stream.attn_input(self)
        if self.kind in (KDA, GDN, GQA):
            out = self.self_attn(x, meta, cache, decode, shard)
        else:
            out, picks = self.self_attn(x, meta, cache, decode, shard, picks)
        stream.add(out)
        stream.add(self.ffn(stream.mlp_input(self), decode))
        return picks
