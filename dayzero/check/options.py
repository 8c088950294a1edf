"""What `dayzero check` runs: the engine it builds (ExportOptions), the prompts, the tokens generated and the
tolerance (one field per CLI option)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dayzero.errors import DayzeroError
from dayzero.export.options import ExportOptions


@dataclass(frozen=True)
class CheckOptions:
    # the engine dayzero's side runs: backend, cache formats, device, dtype (transformers runs on the same device
    # and dtype)
    engine: ExportOptions = field(default_factory=lambda: ExportOptions(backend="eager"))
    prompts: tuple[str, ...] = ()  # texts through the checkpoint's tokenizer; none: fixed token-id prompts
    max_tokens: int = 16  # greedy tokens generated after each prompt
    tolerance: float | None = None  # relative error allowed everywhere; None: the dtype's rule (tolerance.py)

    def __post_init__(self):
        if self.max_tokens < 1:
            raise DayzeroError(f"--max-tokens must be >= 1, got {self.max_tokens}")
        if self.tolerance is not None and not self.tolerance > 0:
            raise DayzeroError(f"--tolerance must be > 0, got {self.tolerance}")
        if self.engine.ranks > 1 or self.engine.num_draft:
            raise DayzeroError("dayzero check runs one rank without speculation (--tp 1 --cp 1 --num-draft 0)")
        object.__setattr__(self, "prompts", tuple(self.prompts))
