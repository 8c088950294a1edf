"""An eager engine of a config with random weights made directly in device memory (`dayzero bench CONFIG
--random-weights`): no checkpoint is written or read, so a model whose weights fit the device but not its disk (or its
host memory) can be benchmarked.

Parameters are made one at a time, in model order (layer by layer), each in its final dtype on the device and filled
there from model/random_init.py's well-scaled values (each stored tensor drawn on its own, a routed expert at a time):
device memory peaks at the model plus one stored tensor in fp32, host memory holds no weights. The network is then laid
out as an export lays it out (export/layout.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from torch import nn

from dayzero.errors import DayzeroError
from dayzero.export.layout import lay_out
from dayzero.export.options import ExportOptions
from dayzero.logs import progress_bar
from dayzero.model.config import ModelConfig
from dayzero.model.eager_engine import EagerEngine, eager_manifest
from dayzero.model.hybrid import HybridModel
from dayzero.model.random_init import random_parts
from dayzero.model.weights import param_dtype


@torch.no_grad()
def random_model(cfg: ModelConfig, dtype: torch.dtype, device: str, seed: int = 0) -> HybridModel:
    """The network of `cfg` with random weights, made parameter by parameter on `device`."""
    with torch.device("meta"):
        model = HybridModel(cfg)
    params = list(model.named_parameters())
    for name, meta in progress_bar(params, desc="random weights", unit="param"):
        value = torch.empty(meta.shape, dtype=param_dtype(name, dtype), device=device)
        _fill(value, name, cfg, seed)
        owner, _, attr = name.rpartition(".")
        setattr(model.get_submodule(owner), attr, nn.Parameter(value, requires_grad=False))
    return model.eval()


def _fill(param: torch.Tensor, name: str, cfg: ModelConfig, seed: int) -> None:
    """Each stored tensor of parameter `name` (one a routed expert) drawn on the device and copied into its place."""
    parts = random_parts(name, tuple(param.shape), cfg, seed, param.device)
    for index, (_, value) in enumerate(parts):
        (param if value.shape == param.shape else param[index]).copy_(value)


def first_layers(cfg: ModelConfig, num_layers: int | None) -> ModelConfig:
    """`cfg` cut to its first `num_layers` layers (None: all of them), as a slice of a model is benchmarked."""
    if num_layers is None:
        return cfg
    if not 1 <= num_layers <= cfg.num_layers:
        raise DayzeroError(f"--num-layers must be in [1, {cfg.num_layers}] for this config, got {num_layers}")
    return dataclasses.replace(cfg, layer_kinds=cfg.layer_kinds[:num_layers], mlp_kinds=cfg.mlp_kinds[:num_layers],
                               index_shared_layers=tuple(i for i in cfg.index_shared_layers if i < num_layers))


def random_engine(config: str | Path, options: ExportOptions, seed: int = 0,
                  num_layers: int | None = None) -> EagerEngine:
    """The eager engine `options` describe (one rank), for the config.json at `config` (or the folder holding one),
    cut to its first `num_layers` layers."""
    if options.backend != "eager" or options.ranks > 1:
        raise DayzeroError("--random-weights builds one eager engine on one device: use --backend eager without --tp "
                           "or --cp")
    cfg = first_layers(ModelConfig.from_hf(config), num_layers)
    model = random_model(cfg, getattr(torch, options.dtype), options.device, seed)
    lay_out(model)
    try:
        manifest = eager_manifest(model, options.cache_format, options.max_batch, options.max_len, options.num_draft)
    except ValueError as err:
        raise DayzeroError(f"the cache formats do not fit this model ({err}); use --kv-cache bf16") from err
    return EagerEngine(model, dataclasses.replace(manifest, extra={"tp": 1, "cp": 1, "rank": 0}))
