"""What one side of a check computes over one token sequence, kept on the host for comparing."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Forward:
    """One full-sequence forward pass: each decoder layer's hidden states and the logits at every position.

    The last layer's states are taken after the final norm, as transformers reports them (`output_hidden_states`:
    the layer outputs, the last one replaced by the model's normed last hidden state)."""

    states: list[torch.Tensor]  # one [T, D] per layer ([T, HC, D]: hyper-connection streams), fp32 on the CPU
    logits: torch.Tensor  # [T, vocab] fp32 on the CPU


def host(t: torch.Tensor) -> torch.Tensor:
    return t.detach().float().cpu()
