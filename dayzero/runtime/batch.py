"""Step inputs of a scheduled batch: token ids and the StepMeta tensors (flat rows, page tables, state slots)."""

from __future__ import annotations

import torch

from dayzero.export.engine import StepMeta
from dayzero.runtime.block_manager import DUMMY_PAGE
from dayzero.runtime.scheduler import ScheduledStep


def step_inputs(step: ScheduledStep, page_size: int, slots_per_seq: int, max_pages: int,
                device: torch.device | str) -> tuple[torch.Tensor, StepMeta]:
    """(input_ids, meta): prefill ids are flat [T]; decode ids are [B, 1]."""
    ids, positions, rows = [], [], []
    table = torch.full((len(step.seqs), max_pages), DUMMY_PAGE, dtype=torch.int32)
    for n, (seq, count) in enumerate(zip(step.seqs, step.num_new)):
        start = seq.num_cached
        ids += seq.token_ids[start : start + count]
        span = range(start, start + count)
        positions += span
        rows += [seq.pages[p // page_size] * page_size + p % page_size for p in span]
        table[n, : len(seq.pages)] = torch.tensor(seq.pages, dtype=torch.int32)
    first_slots = torch.tensor([seq.slot * slots_per_seq for seq in step.seqs], dtype=torch.int32)
    meta = StepMeta(
        positions=torch.tensor(positions),
        cu_seqlens=torch.tensor([0, *step.num_new]).cumsum(0).to(torch.int32),
        block_table=table,
        slot_mapping=torch.tensor(rows),
        state_slots=first_slots[:, None],
        num_accepted=torch.ones(len(step.seqs), dtype=torch.int32),
    )
    input_ids = torch.tensor(ids)
    if step.decode:
        input_ids = input_ids.view(len(step.seqs), 1)
    return input_ids.to(device), StepMeta(**{k: v.to(device) for k, v in vars(meta).items()})
