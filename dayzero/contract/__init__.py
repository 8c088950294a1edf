"""The engine contract: the only thing the runtime knows of an engine (docs/architecture.md)."""

from dayzero.contract.engine import StepEngine
from dayzero.contract.manifest import PAGE, SLOT, CacheTensorSpec, EngineManifest, allocate_flat_caches, slot_tensors
from dayzero.contract.scored_rows import ScoredRows
from dayzero.contract.slots import COPY, ZERO, SlotOp, apply_slot_op, copy_slot, zero_slots
from dayzero.contract.step import StepMeta

__all__ = ["COPY", "PAGE", "SLOT", "ZERO", "CacheTensorSpec", "EngineManifest", "ScoredRows", "SlotOp", "StepEngine",
           "StepMeta", "allocate_flat_caches", "apply_slot_op", "copy_slot", "slot_tensors", "zero_slots"]
