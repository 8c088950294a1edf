"""Manifold-constrained hyper-connections (docs/models.md, "Hyper-connections"): HC residual streams a token in place
of one residual, read and written around every sublayer.

`HyperConnection` holds one sublayer's weights (the checkpoint's `attn_hc` / `ffn_hc`); `HyperConnections` is the
stream a forward pass creates, with the interface of residual.py's streams: each decoder layer asks it for its
attention input, adds the attention output, asks for its MLP input and adds the MLP output (found as the layer's
`attn_hc` and `ffn_hc`); the model asks for the final hidden state. Inputs and the final state come normed by the
sublayer's input norm and the model's final norm.

Each connection collapses the streams with `mhc_pre` and each sublayer's output is added with `mhc_post`, one launch
each.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from dayzero.plugins import mhc


class HyperConnection(nn.Module):
    """fn [(2 + HC) * HC, HC * D] (the model dtype), base [(2 + HC) * HC] and scale [3] (fp32)."""

    def __init__(self, hc_mult: int, hidden_size: int, sinkhorn_iters: int, hc_eps: float, norm_eps: float):
        super().__init__()
        mix = (2 + hc_mult) * hc_mult
        self.fn = nn.Parameter(torch.zeros(mix, hc_mult * hidden_size), requires_grad=False)
        self.base = nn.Parameter(torch.zeros(mix, dtype=torch.float32), requires_grad=False)
        self.scale = nn.Parameter(torch.ones(3, dtype=torch.float32), requires_grad=False)
        self.sinkhorn_iters, self.hc_eps, self.norm_eps = sinkhorn_iters, hc_eps, norm_eps

    def forward(self, streams: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """streams [T, HC, D] -> (the sublayer's input [T, D], post [T, HC], comb [T, HC, HC])."""
        return mhc.mhc_pre(streams, self.fn, self.base, self.scale, self.norm_eps, self.hc_eps, self.sinkhorn_iters)


def layer_connections(layers) -> list[HyperConnection]:
    """Every sublayer's connection in the order they run: each layer's `attn_hc`, then its `ffn_hc`."""
    return [connection for layer in layers for connection in (layer.attn_hc, layer.ffn_hc)]


class HyperConnections:
    """The streams [T, HC, D] of a pass through `connections` (layer_connections' order) and the coefficients of the
    sublayer whose output is added next."""

    def __init__(self, embeddings: torch.Tensor, hc_mult: int, connections: Sequence[HyperConnection]):
        self.streams = embeddings.unsqueeze(1).expand(-1, hc_mult, -1).contiguous()
        self.connections = connections
        self.position = 0
        self.pending: tuple[torch.Tensor, torch.Tensor] | None = None

    def attn_input(self, layer) -> torch.Tensor:
        return layer.input_layernorm(self._collapse(layer.attn_hc))

    def mlp_input(self, layer) -> torch.Tensor:
        return layer.post_attention_layernorm(self._collapse(layer.ffn_hc))

    def _collapse(self, connection: HyperConnection) -> torch.Tensor:
        assert self.position < len(self.connections) and connection is self.connections[self.position], (
            "sublayers ask the stream for their inputs in the order of its connections")
        x, post, comb = connection(self.streams)
        self.pending = (post, comb)
        return x

    def add(self, output: torch.Tensor) -> None:
        assert self.pending is not None, "a sublayer's output is added after the stream gave the sublayer its input"
        post, comb = self.pending
        self.position += 1
        self.streams = mhc.mhc_post(output, self.streams, post, comb)
        self.pending = None

    def output(self, model) -> torch.Tensor:
        return model.norm(mhc.mhc_head(self.streams))

    def state(self) -> torch.Tensor:
        """The streams [T, HC, D] after the latest add."""
        return self.streams
