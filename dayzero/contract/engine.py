"""The step engine: what the runtime drives (docs/architecture.md, "The engine contract").

An engine is anything with the two step functions over explicit inputs:

    prefill(input_ids[T], meta, caches) -> logits[N, vocab]        (each sequence's last new token)
    decode(input_ids[B, 1+d], meta, caches) -> logits[B, 1+d, vocab]

`meta` is a `StepMeta` built by the runtime; `caches` is the flat list the manifest describes. Every other ability
the runtime uses is declared here with its default, so an engine says what it can do instead of being probed.
"""

from __future__ import annotations

import torch

from dayzero.contract.manifest import EngineManifest
from dayzero.contract.scored_rows import ScoredRows
from dayzero.contract.slots import SlotOp
from dayzero.contract.step import StepMeta


class StepEngine:
    manifest: EngineManifest
    # prefill_scored is served: the log-probabilities of the prompt's own next tokens (echo with logprobs)
    scores_prompts: bool = False
    # decode steps run on this process's engine alone (the other ranks' copies are read only by prefill)
    decodes_alone: bool = False
    # a decode step is GPU work alone, so a CUDA graph can replay it
    graph_capturable: bool = True

    def prefill(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError

    def decode(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError

    def prefill_scored(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor],
                       targets: torch.Tensor, num_top: int) -> tuple[torch.Tensor, ScoredRows]:
        """prefill, and the log-probabilities of `targets` (the token after each one; -1: none) with the num_top
        most likely tokens at each scored row; only where `scores_prompts`."""
        raise NotImplementedError(f"{type(self).__name__} does not score prompts")

    def on_slot_op(self, op: SlotOp) -> None:
        """The runtime zeroed or copied state slots of this engine's caches (engines that mirror them act on it)."""

    def close(self) -> None:
        """Release what the engine holds beyond its tensors (worker processes); a second call does nothing."""
