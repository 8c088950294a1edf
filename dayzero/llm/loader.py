"""The one place the runtime acquires an engine: export it (or find it in the compilation cache) and load it."""

from __future__ import annotations

from pathlib import Path

import torch

from dayzero.cache import Entry
from dayzero.contract import StepEngine
from dayzero.errors import DayzeroError
from dayzero.export.options import ExportOptions


def load_step_engine(checkpoint: Path, options: ExportOptions) -> StepEngine:
    """Export (or find in the compilation cache) and load the engine of a checkpoint (all its ranks)."""
    from dayzero.export.build import export_engine, load_engine

    _check_gpus(options)
    entry, _ = export_engine(checkpoint, options)
    if options.ranks == 1:
        return load_engine(entry)
    return start_ranks(entry, options.ranks, [options.rank_device(rank) for rank in range(options.ranks)])


def start_ranks(entry: Entry, ranks: int, devices: list[str]) -> StepEngine:
    """The engines of a multi-rank entry: rank 0's here, one worker process for every other rank."""
    from dayzero.export.build import load_engine
    from dayzero.parallel.multi_rank_engine import MultiRankEngine

    return MultiRankEngine(entry, ranks, devices, load_engine, "dayzero.export.rank_worker")


def _check_gpus(options: ExportOptions) -> None:
    """One GPU a rank, from the first one named: say so before any rank loads (or exports onto a missing GPU)."""
    device = torch.device(options.device)
    if device.type != "cuda":
        return
    first, available = device.index or 0, torch.cuda.device_count()
    if first + options.ranks > available:
        raise DayzeroError(f"--tp {options.tp} x --cp {options.cp} needs {options.ranks} GPUs from cuda:{first}; "
                           f"this host has {available}")
