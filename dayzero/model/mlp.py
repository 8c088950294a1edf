"""Dense gated MLP (the first dense layers and the shared experts)."""

from __future__ import annotations

import torch
from torch import nn

from dayzero.model.collectives import reduce_partial
from dayzero.model.norm import linear
from dayzero.plugins import moe as moe_ops


class GatedMLP(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, activation: str, act_params: dict[str, float]):
        super().__init__()
        self.gate_proj = linear(hidden_size, intermediate_size)
        self.up_proj = linear(hidden_size, intermediate_size)
        self.down_proj = linear(intermediate_size, hidden_size)
        self.activation = activation
        self.act_params = act_params
        # set on a rank that holds part of the intermediate dim of a dense layer (shared experts: the MoE reduces)
        self.tp_group: str | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fused = getattr(self, "gate_up_proj", None)
        gate, up = (fused.weight, None) if fused is not None else (self.gate_proj.weight, self.up_proj.weight)
        y = moe_ops.gated_mlp(x, gate, up, self.down_proj.weight, self.activation, **self.act_params)
        return reduce_partial(y, self.tp_group)
