"""The one place the runtime acquires an engine: export it (or find it in the compilation cache) and load it."""

from __future__ import annotations

from pathlib import Path

from dayzero.export.engine import StepEngine
from dayzero.export.options import ExportOptions


def load_step_engine(checkpoint: Path, options: ExportOptions) -> StepEngine:
    """Export (or find in the compilation cache) and load the engine of a checkpoint."""
    from dayzero.export.build import export_engine, load_engine

    entry, _ = export_engine(checkpoint, options)
    return load_engine(entry)
