"""How much of a model's weights one rank holds under a rank plan, computed on the meta device (no memory), so
that `dayzero plan` can say whether a checkpoint fits a machine before anything is downloaded or exported."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dayzero.dist.rank_plan import RankPlan
from dayzero.model.config import ModelConfig
from dayzero.model.weights import param_dtype, parameter_shapes


@dataclass(frozen=True)
class RankWeights:
    params: int  # parameters one rank holds
    bytes: int
    replicated_bytes: int  # of which every rank holds the same (embeddings, norms, router, latent projections, ...)


def rank_weights(cfg: ModelConfig, plan: RankPlan, dtype: torch.dtype = torch.bfloat16) -> RankWeights:
    whole, local = parameter_shapes(cfg), parameter_shapes(plan.local_config(cfg))
    params = total = replicated = 0
    for name, shape in local.items():
        size = shape.numel()
        nbytes = size * param_dtype(name, dtype).itemsize
        params, total = params + size, total + nbytes
        if shape == whole[name]:
            replicated += nbytes
    return RankWeights(params, total, replicated)
