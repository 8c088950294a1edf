"""One sequence's answer held to a compiled grammar (json_answer.py, tool_call_grammar.py): the tokens its next
logits row allows, and its place moved on by each token it emits.

The place is an xgrammar matcher: `take` moves it on where the grammar allows the token, `rollback` takes tokens
back (speculation walks a draft ahead, then returns: held_drafts.py). An answer is done where its grammar has
nothing left but the end of the sequence: a JSON answer where its object closes, held tool calls where their section
ends (`ends_with`); the mask then allows only the end-of-sequence ids.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import torch
import xgrammar as xgr

from dayzero.errors import DayzeroError

BITS = torch.arange(32, dtype=torch.int32)
# threads filling a batch's masks at once (fill_rows)
FILL_THREADS = min(8, os.cpu_count() or 1)


class HeldAnswer:
    def __init__(self, grammar: xgr.CompiledGrammar, ends_with: int | None = None):
        self.matcher = xgr.GrammarMatcher(grammar)
        self.vocab_size = grammar.tokenizer_info.vocab_size
        self.ends_with = ends_with
        self.tokens: list[int] = []  # taken, and not taken back
        self._bitmask = xgr.allocate_token_bitmask(1, self.vocab_size)

    @property
    def done(self) -> bool:
        if not self.matcher.is_completed():
            return False
        return self.ends_with is None or (bool(self.tokens) and self.tokens[-1] == self.ends_with)

    def fill(self, bitmask: torch.Tensor, index: int = 0) -> None:
        """bitmask[index] (int32 [ceil(vocab / 32)] on the CPU, xgrammar's layout) <- the tokens allowed next."""
        self.matcher.fill_next_token_bitmask(bitmask, index)

    def mask(self, rows: torch.Tensor) -> torch.Tensor:
        """rows [n, vocab] (the next token's logits) -> the same with every token the grammar refuses at -inf."""
        self.fill(self._bitmask)
        return rows.masked_fill(refused_tokens(self._bitmask, self.vocab_size, rows.device), float("-inf"))

    def take(self, token: int) -> bool:
        """Move on by `token` where the grammar allows it -> whether it did."""
        if not self.matcher.accept_token(token):
            return False
        self.tokens.append(token)
        return True

    def advance(self, token: int) -> None:
        if not self.take(token):
            raise DayzeroError(f"token {token} does not continue the held answer (a mask was bypassed)")

    def rollback(self, count: int) -> None:
        """Take back the last `count` tokens taken."""
        if count:
            self.matcher.rollback(count)
            del self.tokens[-count:]


def refused_tokens(bitmask: torch.Tensor, vocab_size: int, device: torch.device) -> torch.Tensor:
    """xgrammar's bitmask int32 [n, ceil(vocab / 32)] on the host (bit i of word j: token 32 j + i allowed) -> bool
    [n, vocab] on `device`, True where a token is refused: unpacked on the host for a CPU, sent packed (32x fewer
    bytes) and unpacked there for a GPU."""
    if device.type == "cpu":
        return refused_on_host(bitmask, vocab_size)
    return refused_unpacked(bitmask.to(device), vocab_size)


def refused_on_host(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    bits = np.unpackbits(np.invert(bitmask.numpy()).view(np.uint8), axis=-1, bitorder="little")
    return torch.from_numpy(bits[:, :vocab_size].view(np.bool_))


def refused_unpacked(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """refused_on_host in torch ops, where the bitmask lies."""
    return ((bitmask.unsqueeze(-1) >> BITS.to(bitmask.device)) & 1).flatten(1)[:, :vocab_size] == 0


def fill_rows(answers: list[HeldAnswer], bitmask: torch.Tensor) -> None:
    """bitmask[i] <- the tokens answers[i] allows next: a batch's masks filled at once, on xgrammar's threads."""
    _batch_matcher().batch_fill_next_token_bitmask([answer.matcher for answer in answers], bitmask)


@functools.cache
def _batch_matcher() -> xgr.BatchGrammarMatcher:
    return xgr.BatchGrammarMatcher(max_threads=FILL_THREADS)
