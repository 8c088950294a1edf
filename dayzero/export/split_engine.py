"""One engine's prefill with another's decode over the same caches (the ONNX graph carries decode only)."""

from __future__ import annotations

import torch

from dayzero.contract import EngineManifest, StepEngine, StepMeta


class SplitEngine(StepEngine):
    def __init__(self, manifest: EngineManifest, prefill: StepEngine, decode: StepEngine):
        self.manifest = manifest
        self._prefill, self._decode = prefill, decode

    def prefill(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> torch.Tensor:
        return self._prefill.prefill(input_ids, meta, caches)

    def decode(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> torch.Tensor:
        return self._decode.decode(input_ids, meta, caches)
