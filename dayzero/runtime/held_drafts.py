"""Speculative drafts for answers held to a grammar (JSON answers, held tool calls): a draft is cut at its first
token the grammar refuses (or where the answer ends), and verify row i is masked by the answer's place after the
first i draft tokens, so accepted runs are exactly what decoding token by token under the masks emits.

The answer (structured.held_answer.HeldAnswer) walks ahead along the draft and takes the draft back after, so the
sequence's own place does not move. The sampler takes the masks as packed bitmasks in xgrammar's layout
(grammar_bitmask.py), which the answer fills as they are.
"""

from __future__ import annotations

import torch

from dayzero.runtime.grammar_bitmask import bitmask_width
from dayzero.structured.held_answer import HeldAnswer


def held_draft(answer: HeldAnswer, draft: list[int]) -> list[int]:
    """The longest start of `draft` the answer takes, up to where it would end."""
    kept: list[int] = []
    for token in draft:
        if answer.done or not answer.take(token):
            break
        kept.append(token)
    answer.rollback(len(kept))
    return kept


def bitmask_along(answer: HeldAnswer, draft: list[int]) -> torch.Tensor:
    """int32 [1 + len(draft), ceil(vocab / 32)]: row i the answer's mask after draft[:i]; rows past the answer's end
    allow everything (nothing they pick is emitted)."""
    bitmask = torch.full((1 + len(draft), bitmask_width(answer.vocab_size)), -1, dtype=torch.int32)
    taken = 0
    for index in range(len(bitmask)):
        if answer.done:
            break
        answer.fill(bitmask, index)
        if index == len(draft) or not answer.take(draft[index]):
            break
        taken += 1
    answer.rollback(taken)
    return bitmask
