"""How sublayer outputs combine across depth: the plain residual add, or block attention residuals (docs/models.md,
"Attention residuals").

A stream is created per forward pass. Each decoder layer asks it for its attention input, adds the attention
output, asks for its MLP input and adds the MLP output; the model asks for the final hidden state.
"""

from __future__ import annotations

import torch
from torch import nn

from dayzero.model.norm import RMSNorm, linear
from dayzero.plugins import attnres


def mix_params(hidden_size: int, eps: float) -> tuple[RMSNorm, nn.Linear]:
    """The checkpoint's `*_res_norm` (RMSNorm, its weight folds into the score) and `*_res_proj` ([1, D])."""
    return RMSNorm(hidden_size, eps), linear(hidden_size, 1)


def depth_mix(norm: RMSNorm, proj: nn.Linear, sources: list[torch.Tensor]) -> torch.Tensor:
    return attnres.attnres_mix(proj.weight[0], sources, norm.weight, norm.eps)


class PlainResidual:
    def __init__(self, embeddings: torch.Tensor):
        self.hidden = embeddings

    def attn_input(self, layer) -> torch.Tensor:
        return self.hidden

    def mlp_input(self, layer) -> torch.Tensor:
        return self.hidden

    def add(self, output: torch.Tensor) -> None:
        self.hidden = self.hidden + output

    def output(self, model) -> torch.Tensor:
        return self.hidden


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
        x = depth_mix(layer.self_attention_res_norm, layer.self_attention_res_proj,
                                  [*self.blocks, self.partial]) if self.blocks else self.partial
        if layer.index % self.block_size == 0:
            self.blocks.append(self.partial)
            self.partial = None
        return x

    def mlp_input(self, layer) -> torch.Tensor:
        return depth_mix(layer.mlp_res_norm, layer.mlp_res_proj, [*self.blocks, self.partial])

    def add(self, output: torch.Tensor) -> None:
        self.partial = output if self.partial is None else self.partial + output

    def output(self, model) -> torch.Tensor:
        return depth_mix(model.output_attn_res_norm, model.output_attn_res_proj, [*self.blocks, self.partial])
