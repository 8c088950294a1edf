"""Random but well-scaled weights for any config: tests, benchmarks and the embedded default model.

Every tensor is drawn from its own generator seeded by (seed, name), so the weights do not depend on the order
they are made in: a checkpoint streamed to disk and a model initialized in memory (on the same device type)
hold the same values.
Projections keep activations at unit scale (std = fan_in^-1/2); projections back into the residual stream are
further scaled by (2 * num_layers)^-1/2; gates and decays follow the ranges real checkpoints use.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Iterator

import torch

from dayzero.model.config import ModelConfig
from dayzero.model.weights import parameter_parts
from dayzero.plugins.quant.reference import MX_BLOCK, mxfp4_quantize

OUTPUT_PROJECTIONS = ("o_proj.weight", "down_proj.weight", "w2.weight", "routed_expert_up_proj.weight")
MXFP4_SUFFIXES = (".weight_packed", ".weight_scale")
# the norms a zero-centered config stores as offsets from 1 (the gated DeltaNet's output norm is not one of them)
ZERO_CENTERED_NORMS = re.compile(r"(layernorm|^model\.norm|q_norm|k_norm)\.weight$")


def _generator(seed: int, name: str, device) -> torch.Generator:
    return torch.Generator(device).manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % (1 << 63))


def _uniform(shape, low: float, high: float, gen) -> torch.Tensor:
    return torch.rand(shape, generator=gen, device=gen.device) * (high - low) + low


def _normal(shape, gen) -> torch.Tensor:
    return torch.randn(shape, generator=gen, device=gen.device)


def _matrix_std(name: str, shape: tuple[int, ...], cfg: ModelConfig) -> float:
    std = shape[-1] ** -0.5
    if name.endswith(OUTPUT_PROJECTIONS):
        std /= math.sqrt(2 * cfg.num_layers)
    return std


def random_tensor(name: str, shape: tuple[int, ...], cfg: ModelConfig, seed: int = 0, device="cpu") -> torch.Tensor:
    """The fp32 value of stored tensor `name` (checkpoint naming) of shape `shape`, drawn on `device` (values are
    the same for the same seed and device type)."""
    gen = _generator(seed, name, device)
    if name.endswith("A_log"):
        return _uniform(shape, 1.0, 16.0, gen).log()
    if name.endswith("dt_bias"):
        dt = _uniform(shape, math.log(1e-3), math.log(1e-1), gen).exp()
        return dt + torch.log(-torch.expm1(-dt))
    if "norm" in name and name.endswith(".bias"):
        return 0.1 * _normal(shape, gen)
    if cfg.zero_centered_norm and ZERO_CENTERED_NORMS.search(name):
        return 0.1 * _normal(shape, gen)
    if "norm" in name:
        return 1.0 + 0.1 * _normal(shape, gen)
    if name.endswith("e_score_correction_bias"):
        return 0.02 * _normal(shape, gen)
    if name.endswith("embed_tokens.weight"):
        return _normal(shape, gen)
    if "conv1d" in name:
        return _normal(shape, gen) * shape[-1] ** -0.5
    return _normal(shape, gen) * _matrix_std(name, shape, cfg)


def _mxfp4_half(name: str, shape: tuple[int, ...], cfg: ModelConfig, seed: int, device) -> torch.Tensor:
    """`*.weight_packed` or `*.weight_scale` of the random weight `*.weight`, quantized to MXFP4."""
    base, _, half = name.rpartition(".weight_")
    k = shape[-1] * (2 if half == "packed" else MX_BLOCK)
    packed, scale = mxfp4_quantize(random_tensor(base + ".weight", (*shape[:-1], k), cfg, seed, device))
    return packed if half == "packed" else scale


def random_parts(name: str, shape: tuple[int, ...], cfg: ModelConfig, seed: int = 0,
                 device="cpu") -> Iterator[tuple[str, torch.Tensor]]:
    """(checkpoint name, value) of each stored tensor of parameter `name` (experts: one per expert): fp32, or
    uint8 for MXFP4 experts (the random fp32 weight, quantized)."""
    for part in parameter_parts(name, shape, cfg):
        stored = part.names[0]
        make = _mxfp4_half if stored.endswith(MXFP4_SUFFIXES) else random_tensor
        yield stored, make(stored, part.shape, cfg, seed, device)


@torch.no_grad()
def init_random_(model, seed: int = 0) -> None:
    """Fill every parameter of `model` in place (on its device, in its dtype)."""
    for name, param in model.named_parameters():
        parts = [value for _, value in random_parts(name, tuple(param.shape), model.config, seed, param.device)]
        param.copy_(parts[0] if len(parts) == 1 and parts[0].shape == param.shape else torch.stack(parts))
