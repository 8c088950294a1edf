"""Write a random, well-scaled checkpoint in HF format (config.json + sharded safetensors + index) for any config.

Tensors are made one at a time and flushed shard by shard, so memory stays at one shard even for full-size
configs. The directory appears only when complete: everything is written to a temporary sibling and renamed.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors.torch import save_file

from dayzero.errors import DayzeroError
from dayzero.logs import progress_bar
from dayzero.model.checkpoint import INDEX_FILE
from dayzero.model.config import ModelConfig
from dayzero.model.expert_format import with_mxfp4_experts
from dayzero.model.hybrid import HybridModel
from dayzero.model.random_init import random_parts
from dayzero.model.weights import param_dtype

DEFAULT_SHARD_BYTES = 2 << 30


def checkpoint_tensors(cfg: ModelConfig, dtype: torch.dtype, seed: int) -> Iterator[tuple[str, torch.Tensor]]:
    """(checkpoint name, tensor) of every stored tensor, in model order (routed experts as MXFP4 `weight_packed` +
    `weight_scale`, K3's release format, when cfg holds them so)."""
    with torch.device("meta"):
        skeleton = HybridModel(cfg)
    params = list(skeleton.named_parameters())
    for name, param in progress_bar(params, desc="writing checkpoint", unit="param"):
        for stored_name, value in random_parts(name, tuple(param.shape), cfg, seed):
            yield stored_name, value.to(param_dtype(name, dtype))


def _shards(tensors: Iterator[tuple[str, torch.Tensor]], shard_bytes: int) -> Iterator[dict[str, torch.Tensor]]:
    shard: dict[str, torch.Tensor] = {}
    size = 0
    for name, tensor in tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if shard and size + nbytes > shard_bytes:
            yield shard
            shard, size = {}, 0
        shard[name] = tensor.contiguous()
        size += nbytes
    if shard:
        yield shard


def _write_shards(tmp: Path, tensors: Iterator[tuple[str, torch.Tensor]], shard_bytes: int) -> None:
    weight_map: dict[str, str] = {}
    total = 0
    files = []
    for number, shard in enumerate(_shards(tensors, shard_bytes), start=1):
        file = f"shard-{number:05d}.safetensors"
        save_file(shard, str(tmp / file), metadata={"format": "pt"})
        files.append(file)
        for name, tensor in shard.items():
            weight_map[name] = file
            total += tensor.numel() * tensor.element_size()
    if len(files) == 1:
        (tmp / files[0]).rename(tmp / "model.safetensors")
        return
    renamed = {f: f"model-{i:05d}-of-{len(files):05d}.safetensors" for i, f in enumerate(files, start=1)}
    for old, new in renamed.items():
        (tmp / old).rename(tmp / new)
    index = {"metadata": {"total_size": total}, "weight_map": {k: renamed[v] for k, v in weight_map.items()}}
    (tmp / INDEX_FILE).write_text(json.dumps(index, indent=2, sort_keys=True))


def write_random_checkpoint(
    config_path: str | Path, out: str | Path, dtype: torch.dtype = torch.bfloat16, seed: int = 0,
    shard_bytes: int = DEFAULT_SHARD_BYTES, overwrite: bool = False, mxfp4_experts: bool = False,
) -> Path:
    """Write a checkpoint for the config at `config_path` (a config.json or a directory holding one) to `out`."""
    config_file = Path(config_path)
    config_file = config_file / "config.json" if config_file.is_dir() else config_file
    cfg = ModelConfig.from_hf(config_file)
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise DayzeroError(f"{out} already exists and is not empty; choose another directory or pass --overwrite")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        shutil.copyfile(config_file, tmp / "config.json")
        _write_shards(tmp, checkpoint_tensors(with_mxfp4_experts(cfg, mxfp4_experts), dtype, seed), shard_bytes)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
