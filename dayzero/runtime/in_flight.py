"""A decode step launched but not finished: its tokens are drawn on the device and on their way to the host.

With overlap (RuntimeOptions.overlap) the engine launches step n + 1 before it reads step n's tokens, so the host
schedules and builds step n + 1 while the device runs step n, and waits once a step, for the copy of step n's tokens
(SGLang's overlap scheduler, vLLM's async scheduling). Step n + 1 feeds each sequence the token step n drew for it,
straight from step n's token tensor; a sequence that step n ends (a stop token, a stop string) has run one step too
many, whose token is dropped and whose cache writes nobody reads (its pages and slots are freed only after it was
queued, and the device runs steps in order).
"""

from __future__ import annotations

from dataclasses import dataclass

from dayzero.runtime.batch_sampler import DrawnRows
from dayzero.runtime.prefix_cache import HeldSnapshot
from dayzero.runtime.sequence import Sequence


@dataclass
class InFlight:
    seqs: list[Sequence]
    drafts: list[list[int]]
    before: list[int]  # each sequence's cached tokens before the step
    drawn: DrawnRows
    # decode snapshots copied at launch, named once the host knows the tokens they cover (prefix_cache.py)
    held: list[HeldSnapshot]

    def drawn_rows(self, seqs: list[Sequence]) -> list[int | None]:
        """For each of seqs, the row of this step's tokens that holds its next input (None: not in this step)."""
        index = {id(seq): b for b, seq in enumerate(self.seqs)}
        return [None if id(seq) not in index else self.drawn.plan.rows_of(index[id(seq)]).start for seq in seqs]
