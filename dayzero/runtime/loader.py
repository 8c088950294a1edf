"""The one place the runtime acquires an engine: export it (or find it in the compilation cache) and load it."""

from __future__ import annotations

from pathlib import Path

from dayzero.export.engine import StepEngine
from dayzero.export.options import ExportOptions


def load_step_engine(checkpoint: Path, options: ExportOptions) -> StepEngine:
    """Export (or find in the compilation cache) and load the engine of a checkpoint (all its ranks)."""
    from dayzero.export.build import export_engine, load_engine

    entry, _ = export_engine(checkpoint, options)
    if options.ranks == 1:
        return load_engine(entry)
    from dayzero.dist.engine import MultiRankEngine

    return MultiRankEngine(entry, options.ranks, [options.rank_device(rank) for rank in range(options.ranks)])
