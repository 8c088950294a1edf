"""The log-probabilities of given next tokens over a prefill's rows, as an engine that scores prompts returns them
(OpenAI's echo with logprobs)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ScoredRows:
    rows: torch.Tensor  # [R] indices of the step's tokens that were scored
    logprobs: torch.Tensor  # [R] fp32: log-probability of each row's target
    top_ids: torch.Tensor  # [R, k] the k most likely next tokens, most likely first
    top_logprobs: torch.Tensor  # [R, k]
