"""The hybrid network: embeddings, decoder layers, the output mix / norm and the LM head.

Module names equal the HF checkpoint names (`model.layers.{i}.self_attn.q_proj`, `lm_head`, ...), so loading is a
name-for-name copy (weights.py handles the few layout differences).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from dayzero.contract import ScoredRows, StepMeta
from dayzero.errors import DayzeroError
from dayzero.model.block import DecoderLayer
from dayzero.model.caches import PLAIN_CACHE, CacheFormat, LayerCache, allocate_caches
from dayzero.model.config import ModelConfig
from dayzero.model.hyper_connections import HyperConnections, layer_connections
from dayzero.model.norm import linear, rms_norm
from dayzero.model.residual import BlockAttnResidual, PlainResidual, mix_params
from dayzero.model.scoring import score_rows
from dayzero.model.step import contiguous_meta
from dayzero.model.zigzag import ContextPlan, ContextShard, split_step
from dayzero.plugins.paged_cache import PAGE_SIZE


class Backbone(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.embed_tokens.weight.requires_grad_(False)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_layers))
        self.norm = rms_norm(cfg.hidden_size, cfg.rms_norm_eps, cfg.zero_centered_norm)
        if cfg.attn_res_block_size is not None:
            self.output_attn_res_norm, self.output_attn_res_proj = mix_params(cfg.hidden_size, cfg.rms_norm_eps)

    def _stream(self, embeddings: torch.Tensor):
        if self.cfg.hyper_connections is not None:
            return HyperConnections(embeddings, self.cfg.hyper_connections.mult, layer_connections(self.layers))
        if self.cfg.attn_res_block_size is None:
            return PlainResidual(embeddings)
        return BlockAttnResidual(embeddings, self.cfg.attn_res_block_size)

    def forward(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[LayerCache], decode: bool,
                shard: ContextShard | None = None, layer_states: list[torch.Tensor] | None = None):
        """input_ids [T] -> normed final hidden states [T, D]. layer_states, when given, collects each layer's output
        [T, D] (`dayzero check`): the residual stream, or under attention residuals the current block's partial
        sum, which is what an AttnRes decoder layer returns, or the hyper-connection streams [T, HC, D]."""
        stream = self._stream(self.embed_tokens(input_ids))
        picks = None
        for layer, cache in zip(self.layers, caches):
            picks = layer(stream, meta, cache, decode, shard, picks)
            if layer_states is not None:
                layer_states.append(stream.state())
        return stream.output(self)


class HybridModel(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.model = Backbone(cfg)
        self.lm_head = linear(cfg.hidden_size, cfg.vocab_size)
        # set on a context-parallel rank: prefill runs its zigzag chunks of the step (zigzag.py)
        self.context_plan: ContextPlan | None = None

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    def prefill(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[LayerCache]) -> torch.Tensor:
        """Varlen prefill of input_ids [T] -> logits [N, vocab] of each sequence's last new token.

        On a context-parallel rank, the rank's chunks of the step; the logits are the step's on rank 0, which runs
        every sequence's last chunk."""
        if self.context_plan is not None:
            input_ids, meta, shard = split_step(input_ids, meta, self.context_plan)
            return self.lm_head(self.model(input_ids, meta, caches, decode=False, shard=shard)[shard.last_rows])
        hidden = self.model(input_ids, meta, caches, decode=False)
        return self._last_logits(hidden, meta)

    def _last_logits(self, hidden: torch.Tensor, meta: StepMeta) -> torch.Tensor:
        """hidden [T, D] of a step's new tokens -> logits [N, vocab] of each sequence's last one."""
        return self.lm_head(hidden[meta.cu_seqlens[1:].long() - 1])

    def prefill_scored(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[LayerCache], targets: torch.Tensor,
                       num_top: int) -> tuple[torch.Tensor, ScoredRows]:
        """prefill, and the log-probability of targets[i] (the token after new token i; -1: not asked) at every row
        that has one, with its num_top most likely tokens (scoring.py). One rank only: a context-parallel rank holds
        part of the rows."""
        if self.context_plan is not None:
            raise DayzeroError("a context-parallel rank cannot score a prompt's tokens; run without --cp")
        hidden = self.model(input_ids, meta, caches, decode=False)
        return self._last_logits(hidden, meta), score_rows(self.lm_head, hidden, targets, num_top)

    def decode(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[LayerCache]) -> torch.Tensor:
        """input_ids [B, 1 + d] -> logits [B, 1 + d, vocab]."""
        hidden = self.model(input_ids.flatten(), meta, caches, decode=True)
        return self.lm_head(hidden).view(*input_ids.shape, -1)

    def allocate_caches(self, num_pages: int, num_slots: int, fmt: CacheFormat = PLAIN_CACHE) -> list[LayerCache]:
        return allocate_caches(self.config, num_pages, num_slots, self.dtype, self.device, fmt)

    @torch.inference_mode()
    def logits(self, input_ids: torch.Tensor, fmt: CacheFormat = PLAIN_CACHE) -> torch.Tensor:
        """Full-sequence logits [B, T, vocab] of input_ids [B, T] from one prefill into fresh caches."""
        batch, length = input_ids.shape
        pages = math.ceil(length / PAGE_SIZE)
        caches = self.allocate_caches(batch * pages, batch, fmt)
        meta = contiguous_meta([0] * batch, [length] * batch, pages, device=self.device)
        hidden = self.model(input_ids.flatten().to(self.device), meta, caches, decode=False)
        return self.lm_head(hidden).view(batch, length, -1)
