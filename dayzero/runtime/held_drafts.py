"""Speculative drafts for answers held to a grammar (JSON answers, held tool calls): a draft is cut at its first
token the grammar refuses (or where the answer ends), and verify row i is masked by the answer's state after the
first i draft tokens, so accepted runs are exactly what decoding token by token under the masks emits.

An answer (token_grammar.JsonAnswer, tool_call_grammar.ToolCallAnswer) keeps immutable values in its fields, so a
shallow copy walks ahead along a draft without moving the sequence's own place. The sampler takes the masks as
packed bitmasks (bitmask_along).
"""

from __future__ import annotations

import copy

import torch

from dayzero.runtime.grammar_bitmask import pack_bitmask


def held_draft(answer, draft: list[int]) -> list[int]:
    """The longest start of `draft` the answer takes, up to where it would end."""
    walker = copy.copy(answer)
    kept: list[int] = []
    for token in draft:
        if walker.done or not _allows(walker, token):
            break
        walker.advance(token)
        kept.append(token)
    return kept


def masked_along(answer, rows: torch.Tensor, draft: list[int]) -> torch.Tensor:
    """rows [1 + len(draft), vocab] of [x0, *draft] -> row i masked by the answer's state after draft[:i]; rows past
    the answer's end are left as they are (nothing they pick is emitted)."""
    walker = copy.copy(answer)
    masked = []
    for index, row in enumerate(rows):
        masked.append(row if walker.done else walker.mask(row[None])[0])
        if index < len(draft):
            walker.advance(draft[index])
    return torch.stack(masked)


def bitmask_along(answer, draft: list[int]) -> torch.Tensor:
    """masked_along's masks as a packed bitmask (grammar_bitmask.py): int32 [1 + len(draft), ceil(vocab / 32)]."""
    rows = masked_along(answer, torch.zeros(1 + len(draft), answer.table.vocab_size), draft)
    return pack_bitmask(torch.isfinite(rows))


def _allows(answer, token: int) -> bool:
    row = torch.zeros(1, answer.table.vocab_size)
    return bool(torch.isfinite(answer.mask(row)[0, token]))
