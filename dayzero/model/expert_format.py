"""Which form the routed experts are held in: as the checkpoint stores them when that is MXFP4 (K3's release
format: 4.25 bits a weight, dequantized inside the grouped GEMM), or dequantized to the model dtype at load time.

Kept packed, a decode step streams a quarter of the expert bytes and a rank holds a quarter of the memory; the
results are the same up to summation order, since every MXFP4 value is exact in bf16.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dayzero.errors import DayzeroError
from dayzero.model.adapters import adapter_for
from dayzero.model.checkpoint import CheckpointReader
from dayzero.model.config import MOE, ModelConfig
from dayzero.plugins.quant.reference import MX_BLOCK

DEQUANTIZE_EXPERTS_HELP = ("Hold routed experts that the checkpoint stores as MXFP4 in the model dtype (about 4x "
                           "their memory) instead of packed and dequantized inside the expert GEMMs.")


def stores_mxfp4_experts(reader: CheckpointReader, cfg: ModelConfig) -> bool:
    """Whether the checkpoint stores every routed expert weight as MXFP4 (`weight_packed` + `weight_scale`); one
    that mixes the forms is held dequantized."""
    if cfg.moe is None:
        return False
    adapter = adapter_for(cfg.model_type)
    moe = cfg.moe
    dim = moe.latent_size or cfg.hidden_size
    shapes = {"w1": (moe.num_experts, moe.intermediate_size, dim), "w3": (moe.num_experts, moe.intermediate_size, dim),
              "w2": (moe.num_experts, dim, moe.intermediate_size)}
    parts = [part for layer, kind in enumerate(cfg.mlp_kinds) if kind == MOE for w, shape in shapes.items()
             for part in adapter.tensor_parts(f"model.layers.{layer}.block_sparse_moe.experts.{w}", shape)]
    return all(any(reader.has_mxfp4(name) for name in part.names) for part in parts)


def with_mxfp4_experts(cfg: ModelConfig, packed: bool = True) -> ModelConfig:
    """`cfg` with its routed experts held as MXFP4 (or not); a model without MoE layers is left as it is."""
    if cfg.moe is None or cfg.moe.mxfp4_experts == packed:
        return cfg
    return dataclasses.replace(cfg, moe=dataclasses.replace(cfg.moe, mxfp4_experts=packed))


def with_expert_format(cfg: ModelConfig, reader: CheckpointReader, keep_mxfp4: bool) -> ModelConfig:
    """`cfg` with its routed experts held packed when the checkpoint stores them so and `keep_mxfp4` asks for it."""
    return with_mxfp4_experts(cfg, keep_mxfp4 and stores_mxfp4_experts(reader, cfg))


def checkpoint_config(path: str | Path, keep_mxfp4: bool = True) -> ModelConfig:
    """The config of the network `load(path)` builds."""
    cfg = ModelConfig.from_hf(path)
    return with_expert_format(cfg, CheckpointReader(path, adapter_for(cfg.model_type).layouts), keep_mxfp4)


def check_packed_split(cfg: ModelConfig, expert_slices: int) -> None:
    """Each rank's slice of an expert's neurons must hold whole MXFP4 blocks of the down projection's inputs."""
    moe = cfg.moe
    if moe is None or not moe.mxfp4_experts or expert_slices == 1:
        return
    if (moe.intermediate_size // expert_slices) % MX_BLOCK:
        raise DayzeroError(
            f"--tp {expert_slices} cuts each MXFP4 expert's {moe.intermediate_size} neurons into slices of "
            f"{moe.intermediate_size // expert_slices}, not a multiple of its {MX_BLOCK}-wide scale blocks; use "
            "--ep equal to --tp (whole experts per rank), or --dequantize-experts")
