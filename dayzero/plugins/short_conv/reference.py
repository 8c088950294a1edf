"""Causal depthwise short convolution with slot-addressed history windows (the KDA q/k/v conv).

x `[T, G, C]` holds G channel groups (q, k, v) of C channels; weight `[G, C, W]`; the history pool
`conv_state [num_slots, G, W-1, C]` keeps the last W-1 *pre-conv* rows of every sequence. For output row t,
y_t = act(sum_w weight[..., w] * x_{t-W+1+w}), rows before the sequence start come from the window (zeros for a
fresh sequence, whose slot the runtime resets). Slot rule as for the KDA state pool.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

ACTIVATIONS = {"silu": F.silu, "identity": lambda x: x}


def _conv_rows(window: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """window [W-1, G, C] + x [L, G, C] -> conv outputs [L, G, C] (fp32, no activation)."""
    rows = torch.cat([window, x], dim=0)
    width = weight.shape[-1]
    taps = rows.unfold(0, width, 1)  # [L, G, C, W]
    return (taps * weight[None]).sum(-1)


def short_conv_prefill(
    x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor, cu_seqlens: torch.Tensor,
    slots: torch.Tensor, activation: str = "silu",
) -> torch.Tensor:
    """Varlen prefill: sequence n is x[cu_seqlens[n]:cu_seqlens[n+1]], history in conv_state[slots[n]].

    Writes each sequence's last W-1 rows (history included when the sequence is shorter) back to its slot;
    slot -1 means no history and no write-back. Returns y [T, G, C] in x's dtype.
    """
    act = ACTIVATIONS[activation]
    width = weight.shape[-1]
    y = torch.zeros_like(x)
    w = weight.float()
    bounds = cu_seqlens.tolist()
    for n, (start, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        slot = int(slots[n])
        window = conv_state[slot].transpose(0, 1).float() if slot >= 0 else x.new_zeros(width - 1, *x.shape[1:]).float()
        rows = x[start:end].float()
        y[start:end] = act(_conv_rows(window, rows, w)).to(x.dtype)
        if slot >= 0:
            conv_state[slot] = torch.cat([window, rows])[-(width - 1):].transpose(0, 1).to(conv_state.dtype)
    return y


def short_conv_decode(
    x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor, state_slots: torch.Tensor,
    num_accepted: torch.Tensor, activation: str = "silu",
) -> torch.Tensor:
    """Decode / verify: x [B, L, G, C]; starts from conv_state[state_slots[b, num_accepted[b]-1]] and writes the
    window after token t into state_slots[b, t]. Rows with state_slots[b, 0] == -1 are padding (output zero)."""
    act = ACTIVATIONS[activation]
    y = torch.zeros_like(x)
    w = weight.float()
    for b in range(x.shape[0]):
        slots = state_slots[b].tolist()
        if slots[0] < 0:
            continue
        window = conv_state[slots[int(num_accepted[b]) - 1]].transpose(0, 1).float()
        for t, slot in enumerate(slots):
            row = x[b, t : t + 1].float()
            y[b, t] = act(_conv_rows(window, row, w))[0].to(x.dtype)
            window = torch.cat([window, row])[1:]
            if slot >= 0:
                conv_state[slot] = window.transpose(0, 1).to(conv_state.dtype)
    return y
