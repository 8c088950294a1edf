"""Which form the routed experts are held in: as the checkpoint stores them when that is MXFP4 (K3's release
format: 4.25 bits a weight, dequantized inside the grouped GEMM), or dequantized to the model dtype at load time.

Kept packed, a decode step streams a quarter of the expert bytes and a rank holds a quarter of the memory; the
results are the same up to summation order, since every MXFP4 value is exact in bf16.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dayzero.errors import DayzeroError
from dayzero.model.checkpoint import CheckpointReader
from dayzero.model.config import MOE, ModelConfig
from dayzero.plugins.quant.reference import MX_BLOCK

MOE_MODULE = "block_sparse_moe"
DEQUANTIZE_EXPERTS_HELP = ("Hold routed experts that the checkpoint stores as MXFP4 in the model dtype (about 4x "
                           "their memory) instead of packed and dequantized inside the expert GEMMs.")


def stores_mxfp4_experts(reader: CheckpointReader, cfg: ModelConfig) -> bool:
    """Whether the checkpoint stores every routed expert weight as MXFP4 (`weight_packed` + `weight_scale`); one
    that mixes the forms is held dequantized."""
    if cfg.moe is None:
        return False
    layers = [i for i, kind in enumerate(cfg.mlp_kinds) if kind == MOE]
    return all(reader.has_mxfp4(f"model.layers.{layer}.{MOE_MODULE}.experts.{expert}.{w}.weight")
               for layer in layers for expert in range(cfg.moe.num_experts) for w in ("w1", "w2", "w3"))


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
    return with_expert_format(ModelConfig.from_hf(path), CheckpointReader(path), keep_mxfp4)


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
