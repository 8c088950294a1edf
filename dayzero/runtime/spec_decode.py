"""Speculative decoding: draft proposers and the acceptance rule of a verify step (docs/architecture.md, "The
runtime").

A verify step feeds a sequence's last token and n <= d drafts, [x0, x1 .. xn]; logits row t predicts the token that
follows input t. Acceptance keeps drafts x1..xk and adds one token of the model's own after them, so a step emits
1..1+n tokens and 1+k of its inputs stay in the cache (the next step's `num_accepted`). Rows past the accepted ones
need no undo: their KV rows are overwritten later and their KDA states sit in slots the next step does not read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class DraftProposer(Protocol):
    def __call__(self, token_ids: list[int], num_draft: int) -> list[int]:
        """Up to num_draft tokens guessed to follow token_ids (fewer, or none, when there is no good guess)."""


@dataclass(frozen=True)
class NgramProposer:
    """Prompt lookup: find the most recent earlier occurrence of the longest tail n-gram (max_ngram down to
    min_ngram tokens) in the sequence's own prompt + output and propose what followed it."""

    max_ngram: int = 3
    min_ngram: int = 1

    def __call__(self, token_ids: list[int], num_draft: int) -> list[int]:
        if num_draft == 0:
            return []
        for n in range(min(self.max_ngram, len(token_ids) - 1), self.min_ngram - 1, -1):
            start = _last_match(token_ids, n)
            if start is not None:
                return _continuation(token_ids, start + n, num_draft)
        return []


def _last_match(token_ids: list[int], n: int) -> int | None:
    """Start of the most recent n-gram equal to the last n tokens, the tail itself excluded."""
    tail = token_ids[-n:]
    for start in range(len(token_ids) - n - 1, -1, -1):
        if token_ids[start : start + n] == tail:
            return start
    return None


def _continuation(token_ids: list[int], source: int, num_draft: int) -> list[int]:
    # a match close to the tail runs out of tokens: keep copying from the proposal itself (a repeating cycle)
    extended = list(token_ids)
    for offset in range(num_draft):
        extended.append(extended[source + offset])
    return extended[len(token_ids) :]


# RuntimeOptions.draft_method -> proposer
PROPOSERS: dict[str, Callable[[], DraftProposer]] = {"ngram": NgramProposer}


def accepted_run(samples: list[int], drafts: list[int]) -> list[int]:
    """The tokens sampled at each verify position (batch_sampler.py) -> the longest prefix of drafts equal to them,
    then the sample after it. Greedy rows sample the argmax, so greedy tokens equal greedy decoding without drafts;
    a random row's sample equals its draft with the draft's probability, the rejection rule for a point-mass draft,
    and its seeded draws make the tokens those of decoding without drafts."""
    accepted = 0
    while accepted < len(drafts) and drafts[accepted] == samples[accepted]:
        accepted += 1
    return samples[: accepted + 1]
