"""How much of a model's weights one rank holds under a rank plan, computed on the meta device (no memory), so
that `dayzero plan` can say whether a checkpoint fits a machine before anything is downloaded or exported."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dayzero.export.rank_plan import RankPlan
from dayzero.model.config import ModelConfig
from dayzero.model.weights import EXPERT_PARAM, param_dtype, parameter_shapes


@dataclass(frozen=True)
class RankWeights:
    params: int  # parameters one rank holds
    bytes: int
    replicated_bytes: int  # of which every rank holds the same (embeddings, norms, router, latent projections, ...)


def model_parameters(name: str, shape: torch.Size) -> int:
    """Weights a stored tensor holds: two a byte of MXFP4 values, none in their scales."""
    expert = EXPERT_PARAM.match(name)
    mxfp4 = expert["mxfp4"] if expert else None
    if mxfp4 == "_packed":
        return 2 * shape.numel()
    return 0 if mxfp4 == "_scale" else shape.numel()


def parameter_bytes(name: str, shape: torch.Size, dtype: torch.dtype) -> int:
    """Bytes parameter `name` takes in a model of `dtype` (fp32 gates and router, uint8 MXFP4 experts)."""
    return shape.numel() * param_dtype(name, dtype).itemsize


def rank_weights(cfg: ModelConfig, plan: RankPlan, dtype: torch.dtype = torch.bfloat16) -> RankWeights:
    whole, local = parameter_shapes(cfg), parameter_shapes(plan.local_config(cfg))
    params = total = replicated = 0
    for name, shape in local.items():
        nbytes = parameter_bytes(name, shape, dtype)
        params, total = params + model_parameters(name, shape), total + nbytes
        if shape == whole[name]:
            replicated += nbytes
    return RankWeights(params, total, replicated)
