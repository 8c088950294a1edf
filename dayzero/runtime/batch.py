"""Step inputs of a scheduled batch: token ids and the StepMeta tensors (flat rows, page tables, state slots)."""

from __future__ import annotations

import torch

from dayzero.contract import StepMeta
from dayzero.runtime.block_manager import DUMMY_PAGE
from dayzero.runtime.scheduler import ScheduledStep
from dayzero.runtime.sequence import Sequence

# the row of a padded draft position: its KV is not written
SKIP_ROW = -1


def prefill_inputs(step: ScheduledStep, page_size: int, slots_per_seq: int, max_pages: int,
                   device: torch.device | str) -> tuple[torch.Tensor, StepMeta]:
    """(input_ids [T], meta): each sequence's next chunk; its state is read from and written to its first slot."""
    ids, positions, rows = [], [], []
    for seq, count in zip(step.seqs, step.num_new):
        span = range(seq.num_cached, seq.num_cached + count)
        ids += seq.token_ids[span.start : span.stop]
        positions += span
        rows += [_cache_row(seq, p, page_size) for p in span]
    meta = StepMeta(
        positions=torch.tensor(positions),
        cu_seqlens=torch.tensor([0, *step.num_new]).cumsum(0).to(torch.int32),
        block_table=_block_table(step.seqs, max_pages),
        slot_mapping=torch.tensor(rows),
        state_slots=_state_slots(step.seqs, slots_per_seq, 1),
        num_accepted=torch.ones(len(step.seqs), dtype=torch.int32),
    )
    return _to(torch.tensor(ids), meta, device)


def decode_inputs(seqs: list[Sequence], drafts: list[list[int]], width: int, page_size: int, slots_per_seq: int,
                  max_pages: int, device: torch.device | str) -> tuple[torch.Tensor, StepMeta]:
    """(input_ids [B, width], meta): each row is the sequence's last token, its drafts, then padding up to width
    (padded positions repeat the last real one and write no KV; their states land in slots nobody reads)."""
    ids, positions, rows = [], [], []
    for seq, draft in zip(seqs, drafts):
        real = range(seq.num_cached, seq.num_cached + 1 + len(draft))
        num_pad = width - len(real)
        ids += [seq.last_token, *draft, *[seq.last_token] * num_pad]
        positions += [*real, *[real[-1]] * num_pad]
        rows += [*(_cache_row(seq, p, page_size) for p in real), *[SKIP_ROW] * num_pad]
    meta = StepMeta(
        positions=torch.tensor(positions),
        cu_seqlens=torch.arange(0, width * len(seqs) + 1, width, dtype=torch.int32),
        block_table=_block_table(seqs, max_pages),
        slot_mapping=torch.tensor(rows),
        state_slots=_state_slots(seqs, slots_per_seq, width),
        num_accepted=torch.tensor([seq.num_accepted for seq in seqs], dtype=torch.int32),
    )
    return _to(torch.tensor(ids).view(len(seqs), width), meta, device)


def _cache_row(seq: Sequence, position: int, page_size: int) -> int:
    return seq.pages[position // page_size] * page_size + position % page_size


def _block_table(seqs: list[Sequence], max_pages: int) -> torch.Tensor:
    table = torch.full((len(seqs), max_pages), DUMMY_PAGE, dtype=torch.int32)
    for n, seq in enumerate(seqs):
        table[n, : len(seq.pages)] = torch.tensor(seq.pages, dtype=torch.int32)
    return table


def _state_slots(seqs: list[Sequence], slots_per_seq: int, width: int) -> torch.Tensor:
    """[B, width]: token t of a sequence writes its state into slot t of the sequence's group."""
    first = torch.tensor([seq.slot * slots_per_seq for seq in seqs], dtype=torch.int32)
    return first[:, None] + torch.arange(width, dtype=torch.int32)[None, :]


def _to(input_ids: torch.Tensor, meta: StepMeta, device: torch.device | str) -> tuple[torch.Tensor, StepMeta]:
    return input_ids.to(device), StepMeta(**{k: v.to(device) for k, v in vars(meta).items()})
