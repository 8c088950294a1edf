"""How sublayer outputs combine across depth: the plain residual add, or block attention residuals (docs/models.md,
"Attention residuals").

A stream is created per forward pass. Each decoder layer asks it for its attention input, adds the attention
output, asks for its MLP input and adds the MLP output; the model asks for the final hidden state. Inputs and the
final state come normed, by the sublayer's input norm (`layer.input_layernorm`, `layer.post_attention_layernorm`) and
the model's final norm (`model.norm`): the plain stream runs each add together with the norm that follows it.
`state()` is the residual after the latest add (what `dayzero check` compares per layer).
"""

from __future__ import annotations

import torch
from torch import nn

from dayzero.model.norm import RMSNorm, linear
from dayzero.plugins import attnres


def mix_params(hidden_size: int, eps: float) -> tuple[RMSNorm, nn.Linear]:
    """The checkpoint's `*_res_norm` (RMSNorm, its weight folds into the score) and `*_res_proj` ([1, D])."""
    return RMSNorm(hidden_size, eps), linear(hidden_size, 1)


def normed_depth_mix(mix_norm: RMSNorm, proj: nn.Linear, sources: list[torch.Tensor], norm: RMSNorm) -> torch.Tensor:
    """`norm` of the depth mix of `sources` (scored through the checkpoint's `*_res_norm` and `*_res_proj`): one
    launch (`attnres_mix_norm`) where `norm` scales by its weight."""
    if norm.zero_centered:
        return norm(attnres.attnres_mix(proj.weight[0], sources, mix_norm.weight, mix_norm.eps))
    return attnres.attnres_mix(proj.weight[0], sources, mix_norm.weight, mix_norm.eps, norm.weight, norm.eps)[1]


class PlainResidual:
    """The residual sum, and the latest sublayer output until the next norm adds it (`add_rms_norm`: one launch for
    the add and the norm, the sum rounded to the stream's dtype as a separate add would)."""

    def __init__(self, embeddings: torch.Tensor):
        self.hidden = embeddings
        self.pending: torch.Tensor | None = None

    def attn_input(self, layer) -> torch.Tensor:
        return self._normed(layer.input_layernorm)

    def mlp_input(self, layer) -> torch.Tensor:
        return self._normed(layer.post_attention_layernorm)

    def add(self, output: torch.Tensor) -> None:
        self._settle()
        self.pending = output

    def output(self, model) -> torch.Tensor:
        return self._normed(model.norm)

    def state(self) -> torch.Tensor:
        self._settle()
        return self.hidden

    def _normed(self, norm) -> torch.Tensor:
        if self.pending is None:
            return norm(self.hidden)
        self.hidden, normed = norm.after_add(self.hidden, self.pending)
        self.pending = None
        return normed

    def _settle(self) -> None:
        if self.pending is not None:
            self.hidden, self.pending = self.hidden + self.pending, None


class BlockAttnResidual:
    """Closed block states plus the running partial sum of the current block.

    Layer l with l % block_size == 0 closes the current block (the embedding is block 0) after computing its
    attention input; every mix runs over the closed blocks plus the partial sum.
    """

    def __init__(self, embeddings: torch.Tensor, block_size: int):
        self.blocks: list[torch.Tensor] = []
        self.partial: torch.Tensor | None = embeddings
        self.block_size = block_size

    def attn_input(self, layer) -> torch.Tensor:
        if self.blocks:
            x = normed_depth_mix(layer.self_attention_res_norm, layer.self_attention_res_proj,
                                 [*self.blocks, self.partial], layer.input_layernorm)
        else:
            x = layer.input_layernorm(self.partial)
        if layer.index % self.block_size == 0:
            self.blocks.append(self.partial)
            self.partial = None
        return x

    def mlp_input(self, layer) -> torch.Tensor:
        return normed_depth_mix(layer.mlp_res_norm, layer.mlp_res_proj, [*self.blocks, self.partial],
                                layer.post_attention_layernorm)

    def add(self, output: torch.Tensor) -> None:
        self.partial = output if self.partial is None else self.partial + output

    def output(self, model) -> torch.Tensor:
        return normed_depth_mix(model.output_attn_res_norm, model.output_attn_res_proj, [*self.blocks, self.partial],
                                model.norm)

    def state(self) -> torch.Tensor:
        """The current block's partial sum: what an AttnRes decoder layer returns."""
        return self.partial
