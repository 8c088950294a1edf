"""The logit adjustments of penalties.py for all of a step's rows at once, on the device: the same arithmetic in the
same order as penalties.penalized, so each row equals its result bit for bit; then the grammar masks."""

from __future__ import annotations

import torch

from dayzero.runtime.grammar_bitmask import unpack_bitmask
from dayzero.runtime.row_plan import CountingRows


def with_bias(work: torch.Tensor, rows: torch.Tensor, tokens: torch.Tensor, values: torch.Tensor) -> None:
    """work [R, vocab] += each (row, token)'s logit_bias, in place."""
    work.index_put_((rows, tokens), values, accumulate=True)


def penalized_rows(x: torch.Tensor, generated: torch.Tensor, in_prompt: torch.Tensor,
                   penalties: CountingRows) -> torch.Tensor:
    """x [n, vocab] (biased), generated [n, vocab] (each token's count before the row), in_prompt bool [n, vocab] ->
    x less frequency x count and presence x (count > 0), then a seen token's logit divided by the repetition penalty
    where positive, multiplied where negative. A penalty no row has is left out (subtracting 0 x count changes no
    bit)."""
    present = generated > 0
    if penalties.any_frequency:
        x = x - penalties.frequency[:, None] * generated
    if penalties.any_presence:
        # x - presence x 1 where present, x - presence x 0 = x elsewhere: the reference's bits, in fewer passes
        x = torch.where(present, x - penalties.presence[:, None], x)
    if penalties.any_repetition:
        seen = in_prompt | present
        repetition = penalties.repetition[:, None]
        x = torch.where(seen, torch.where(x > 0, x / repetition, x * repetition), x)
    return x


def with_bans(work: torch.Tensor, rows: torch.Tensor, tokens: torch.Tensor) -> None:
    """Each (row, token) at -inf, in place: stop ids before min_tokens."""
    work.index_put_((rows, tokens), work.new_full((), float("-inf")))


def masked(x: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """x [n, vocab], bitmask int32 [n, ceil(vocab / 32)] -> x with the tokens the bitmask refuses at -inf."""
    return x.masked_fill(~unpack_bitmask(bitmask, x.shape[1]), float("-inf"))
