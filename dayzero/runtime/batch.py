"""Step inputs of a scheduled batch: token ids and the StepMeta tensors (flat rows, page tables, state slots), moved
to the device in one copy per dtype (transfers.upload), so building them never waits for the kernels queued before.

A decode row whose last token a step in flight drew on the device (llm_engine.py, overlap) takes it from that step's
token tensor there: the host never reads it first.
"""

from __future__ import annotations

import torch

from dayzero.contract import StepMeta
from dayzero.runtime.block_manager import DUMMY_PAGE
from dayzero.runtime.scheduler import ScheduledStep
from dayzero.runtime.sequence import Sequence
from dayzero.runtime.transfers import upload

# the row of a padded draft position: its KV is not written
SKIP_ROW = -1


def prefill_inputs(step: ScheduledStep, page_size: int, slots_per_seq: int,
                   device: torch.device | str) -> tuple[torch.Tensor, StepMeta]:
    """(input_ids [T], meta): each sequence's next chunk; its state is read from and written to its first slot."""
    ids, positions, rows = [], [], []
    for seq, count in zip(step.seqs, step.num_new):
        span = range(seq.num_cached, seq.num_cached + count)
        ids += seq.token_ids[span.start : span.stop]
        positions += span
        rows += [_cache_row(seq, p, page_size) for p in span]
    cu_seqlens = [0]
    for count in step.num_new:
        cu_seqlens.append(cu_seqlens[-1] + count)
    longs = {"ids": ids, "positions": positions, "slot_mapping": rows}
    ints = {"cu_seqlens": cu_seqlens, **_tables(step.seqs, slots_per_seq, 1),
            "num_accepted": [1] * len(step.seqs)}
    longs, ints = upload(longs, torch.int64, torch.device(device)), upload(ints, torch.int32, torch.device(device))
    return longs["ids"], _meta(longs, ints, len(step.seqs))


def decode_inputs(seqs: list[Sequence], drafts: list[list[int]], width: int, page_size: int, slots_per_seq: int,
                  device: torch.device | str, drawn: torch.Tensor | None = None,
                  drawn_rows: list[int | None] | None = None) -> tuple[torch.Tensor, StepMeta]:
    """(input_ids [B, width], meta): each row is the sequence's last token, its drafts, then padding up to width
    (padded positions repeat the last real one and write no KV; their states land in slots nobody reads).
    drawn: a step's tokens on the device; drawn_rows[b]: where sequence b's last token is one of them, its index (the
    row has no drafts), else None."""
    drawn_rows = drawn_rows or [None] * len(seqs)
    ids, positions, rows = [], [], []
    for seq, draft, drawn_row in zip(seqs, drafts, drawn_rows):
        real = range(seq.num_cached, seq.num_cached + 1 + len(draft))
        num_pad = width - len(real)
        last = 0 if drawn_row is not None else seq.last_token
        ids += [last, *draft, *[last] * num_pad]
        positions += [*real, *[real[-1]] * num_pad]
        rows += [*(_cache_row(seq, p, page_size) for p in real), *[SKIP_ROW] * num_pad]
    chained = [b for b, row in enumerate(drawn_rows) if row is not None]
    longs = {"ids": ids, "positions": positions, "slot_mapping": rows, "chained": chained,
             "chained_from": [drawn_rows[b] for b in chained]}
    ints = {"cu_seqlens": list(range(0, width * len(seqs) + 1, width)),
            **_tables(seqs, slots_per_seq, width), "num_accepted": [seq.num_accepted for seq in seqs]}
    longs, ints = upload(longs, torch.int64, torch.device(device)), upload(ints, torch.int32, torch.device(device))
    input_ids = longs["ids"].view(len(seqs), width)
    if chained:
        # every position of a chained row without drafts holds its last token
        input_ids.index_copy_(0, longs["chained"], drawn[longs["chained_from"]][:, None].expand(-1, width))
    return input_ids, _meta(longs, ints, len(seqs))


def _cache_row(seq: Sequence, position: int, page_size: int) -> int:
    return seq.pages[position // page_size] * page_size + position % page_size


def _tables(seqs: list[Sequence], slots_per_seq: int, width: int) -> dict[str, list[int]]:
    """The page table [B, P] (P: the most pages a sequence of the batch has; the dummy page past each sequence's
    pages) and the state slots [B, width]: token t of a sequence writes its state into slot t of the sequence's group.
    The table is no wider than the batch needs: padded to the engine's longest sequence (16384 pages at a 1M-token
    context), building and copying it costs more host time a step than the step's kernels at batch 64
    (bench/bench_step_host.py)."""
    num_pages = max(len(seq.pages) for seq in seqs)
    padded = ([*seq.pages, *[DUMMY_PAGE] * (num_pages - len(seq.pages))] for seq in seqs)
    return {"block_table": [page for pages in padded for page in pages],
            "state_slots": [seq.slot * slots_per_seq + t for seq in seqs for t in range(width)]}


def _meta(longs: dict[str, torch.Tensor], ints: dict[str, torch.Tensor], num_seqs: int) -> StepMeta:
    return StepMeta(positions=longs["positions"], cu_seqlens=ints["cu_seqlens"],
                    block_table=ints["block_table"].view(num_seqs, -1), slot_mapping=longs["slot_mapping"],
                    state_slots=ints["state_slots"].view(num_seqs, -1), num_accepted=ints["num_accepted"])
