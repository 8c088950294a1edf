"""Device rows for the counting penalties (penalties.py), one per sequence that has them: how often each token was
generated, and whether the prompt holds it. A row is filled when its sequence first needs it and then grows by the
tokens emitted since, so a step moves only those few ids to the device; rows of finished sequences are taken back
when a new one needs room. A token a step in flight drew (llm_engine.py, overlap) is counted on the device, from that
step's token tensor, before the host reads it."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dayzero.runtime.sequence import Sequence
from dayzero.runtime.transfers import upload


@dataclass
class _Row:
    seq: Sequence
    index: int
    num_counted: int = 0


class TokenCounts:
    def __init__(self, vocab_size: int, device: torch.device):
        self.vocab_size, self.device = vocab_size, device
        self.generated = torch.zeros(0, vocab_size, device=device)  # [rows, vocab]
        self.in_prompt = torch.zeros(0, vocab_size, dtype=torch.bool, device=device)
        # by id(seq): the row holds its sequence, so the id is not reused while the row lives
        self._rows: dict[int, _Row] = {}

    def rows_of(self, seqs: list[Sequence], drawn: torch.Tensor | None = None,
                drawn_rows: list[int | None] | None = None) -> list[int]:
        """The rows of seqs, each brought up to date with its output tokens. drawn: a step's tokens on the device;
        drawn_rows[b]: the one that is seqs[b]'s last output token, where the host has not read it (else None)."""
        rows = [self._current(seq) for seq in seqs]
        owners, tokens, drawn_owners, drawn_from = [], [], [], []
        for row, drawn_row in zip(rows, drawn_rows or [None] * len(rows)):
            new = row.seq.output_ids[row.num_counted:]
            owners += [row.index] * len(new)
            tokens += new
            row.num_counted += len(new)
            if drawn_row is not None and row.num_counted < _drawn(row.seq):
                drawn_owners.append(row.index)
                drawn_from.append(drawn_row)
                row.num_counted += 1
        if tokens or drawn_owners:
            sent = upload({"owners": owners, "tokens": tokens, "drawn_owners": drawn_owners,
                           "drawn_from": drawn_from}, torch.int64, self.device)
            owners = torch.cat([sent["owners"], sent["drawn_owners"]])
            tokens = torch.cat([sent["tokens"], drawn[sent["drawn_from"]] if drawn_owners else sent["drawn_from"]])
            self.generated.index_put_((owners, tokens), torch.ones(len(owners), device=self.device), accumulate=True)
        return [row.index for row in rows]

    def _current(self, seq: Sequence) -> _Row:
        row = self._rows.get(id(seq))
        if row is not None and row.num_counted <= _drawn(seq):
            return row
        row = _Row(seq, self._free_index() if row is None else row.index)
        self.generated[row.index] = 0
        self.in_prompt[row.index] = False
        self.in_prompt[row.index, torch.tensor(seq.prompt_ids, dtype=torch.long, device=self.device)] = True
        self._rows[id(seq)] = row
        return row

    def _free_index(self) -> int:
        for key in [key for key, row in self._rows.items() if row.seq.is_done]:
            del self._rows[key]
        taken = {row.index for row in self._rows.values()}
        free = next((i for i in range(self.generated.shape[0]) if i not in taken), None)
        if free is not None:
            return free
        free = self.generated.shape[0]
        grown = max(4, 2 * free)
        self.generated = torch.cat([self.generated, self.generated.new_zeros(grown - free, self.vocab_size)])
        self.in_prompt = torch.cat([self.in_prompt, self.in_prompt.new_zeros(grown - free, self.vocab_size)])
        return free


def _drawn(seq: Sequence) -> int:
    """seq's output tokens drawn so far: those on the host and those still on the device."""
    return len(seq.output_ids) + seq.num_pending
