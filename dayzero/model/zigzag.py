"""Context parallelism's token split (docs/architecture.md, "Context parallelism"): each sequence's new tokens of a
prefill step are cut into 2·cp chunks, and rank r runs chunks r and 2·cp−1−r ("zigzag"), so every rank gets an
early and a late chunk and the causal work is balanced.

`split_step` turns the step every rank receives (the whole batch) into the rank's own step: its chunks as varlen
segments (empty chunks left out), padded with one segment of throw-away tokens to the longest rank's token count,
because the collectives that join the ranks take equal shapes. The `ContextShard` it returns tells the layers where
each local segment sits in the sequence, so they can exchange what crosses chunk borders (model/kda_context.py,
the latent and index rows of MLA layers).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dayzero.contract import StepMeta
from dayzero.model.collectives import gather_ranks

# the local segment a chunk lands in: 0 for chunk r (early), 1 for chunk 2·cp−1−r (late)
LOCAL_CHUNKS = 2


@dataclass(frozen=True)
class ContextPlan:
    """Where a rank sits in the context-parallel group, fixed at load time."""

    cp: int
    rank: int
    group: str  # the c10d group name the ranks' collectives run over


@dataclass
class ContextShard:
    """One prefill step as one rank sees it."""

    plan: ContextPlan
    seq_slots: torch.Tensor  # [N] state slot of each sequence (its entry state and window; its exit ones go there)
    cells: torch.Tensor  # [S] n * 2 + j of each real local segment (sequence n, local chunk j)
    chunks: torch.Tensor  # [S] n * 2cp + c: the segment's place among all sequences' chunks in order
    chunk_lengths: torch.Tensor  # [N, 2cp] tokens of each sequence's chunks, in sequence order
    last_rows: torch.Tensor  # [N] local row of each sequence's last new token (its own on rank 0, which holds it)

    @property
    def num_seqs(self) -> int:
        return self.seq_slots.shape[0]

    def owner(self, chunk: int) -> tuple[int, int]:
        """The (rank, local chunk j) that runs chunk `chunk` of a sequence."""
        cp = self.plan.cp
        return (chunk, 0) if chunk < cp else (2 * cp - 1 - chunk, 1)


def chunk_bounds(length: int, cp: int) -> list[int]:
    """Offsets of a sequence's 2·cp chunks within its `length` new tokens. The remainder goes to the last chunks,
    so the last chunk (rank 0's) is never empty and holds the sequence's last token."""
    count = 2 * cp
    base, extra = divmod(length, count)
    sizes = [base + (i >= count - extra) for i in range(count)]
    return [sum(sizes[:i]) for i in range(count + 1)]


def _sizes(length: int, cp: int) -> list[int]:
    bounds = chunk_bounds(length, cp)
    return [b - a for a, b in zip(bounds, bounds[1:])]


def _rank_segments(lengths: list[int], starts: list[int], rank: int, cp: int) -> list[tuple[int, int, int, int]]:
    """(sequence n, local chunk j, start, end) of a rank's non-empty chunks, as global token offsets."""
    segments = []
    for n, (length, start) in enumerate(zip(lengths, starts)):
        bounds = chunk_bounds(length, cp)
        for j, chunk in enumerate((rank, 2 * cp - 1 - rank)):
            if bounds[chunk + 1] > bounds[chunk]:
                segments.append((n, j, start + bounds[chunk], start + bounds[chunk + 1]))
    return segments


def _token_count(segments) -> int:
    return sum(end - start for _, _, start, end in segments)


def split_step(input_ids: torch.Tensor, meta: StepMeta, plan: ContextPlan) -> tuple[torch.Tensor, StepMeta,
                                                                                    ContextShard]:
    """The whole prefill step -> (this rank's input_ids, its StepMeta, its ContextShard).

    The padding segment (when this rank has fewer tokens than the busiest) writes nothing (slot -1), starts from a
    zero state and reads sequence 0's pages; its outputs are dropped."""
    cu = meta.cu_seqlens.tolist()
    lengths, starts = [b - a for a, b in zip(cu, cu[1:])], cu[:-1]
    everyone = [_rank_segments(lengths, starts, rank, plan.cp) for rank in range(plan.cp)]
    mine = everyone[plan.rank]
    pad = max(_token_count(s) for s in everyone) - _token_count(mine)
    device = input_ids.device
    take = torch.cat([torch.arange(start, end) for _, _, start, end in mine] or [torch.zeros(0, dtype=torch.long)])
    take = take.to(device)
    seq_of_segment = torch.tensor([n for n, *_ in mine], dtype=torch.long, device=device)
    filler = torch.zeros(pad, dtype=torch.long, device=device)
    local_lengths = [end - start for *_, start, end in mine] + ([pad] if pad else [])
    local = StepMeta(
        positions=torch.cat([meta.positions[take], torch.arange(pad, device=device).to(meta.positions.dtype)]),
        cu_seqlens=torch.tensor([0, *local_lengths], device=device).cumsum(0).to(meta.cu_seqlens.dtype),
        block_table=torch.cat([meta.block_table[seq_of_segment], meta.block_table[:1].expand(int(pad > 0), -1)]),
        slot_mapping=torch.cat([meta.slot_mapping[take], (filler - 1).to(meta.slot_mapping.dtype)]),
        state_slots=torch.cat([meta.state_slots[seq_of_segment, :1],
                               torch.full((int(pad > 0), 1), -1, dtype=meta.state_slots.dtype, device=device)]),
        num_accepted=torch.ones(len(local_lengths), dtype=meta.num_accepted.dtype, device=device),
    )
    shard = ContextShard(
        plan=plan,
        seq_slots=meta.state_slots[:, 0].long(),
        cells=torch.tensor([n * LOCAL_CHUNKS + j for n, j, *_ in mine], dtype=torch.long, device=device),
        chunks=torch.tensor([n * 2 * plan.cp + (plan.rank if j == 0 else 2 * plan.cp - 1 - plan.rank)
                             for n, j, *_ in mine], dtype=torch.long, device=device),
        chunk_lengths=torch.tensor([_sizes(length, plan.cp) for length in lengths], dtype=torch.long,
                                   device=device).view(len(lengths), 2 * plan.cp),
        last_rows=_last_rows(mine, len(lengths), device),
    )
    return torch.cat([input_ids[take], filler.to(input_ids.dtype)]), local, shard


def _last_rows(segments, num_seqs: int, device) -> torch.Tensor:
    """Each sequence's last local row (row 0 where this rank holds none of it)."""
    rows, offset = [0] * num_seqs, 0
    for n, _, start, end in segments:
        offset += end - start
        rows[n] = offset - 1
    return torch.tensor(rows, dtype=torch.long, device=device)


def rows_of_all_ranks(rows: torch.Tensor, slot_mapping: torch.Tensor,
                      shard: ContextShard | None) -> tuple[torch.Tensor, torch.Tensor]:
    """New cache rows [T, ...] and their slots [T] of this rank -> those of every rank (each rank's paged caches
    hold the whole sequences: its queries read rows of chunks other ranks ran, and decode reads them all)."""
    if shard is None:
        return rows, slot_mapping
    plan = shard.plan
    return (gather_ranks(rows, plan.group, plan.cp).flatten(0, 1),
            gather_ranks(slot_mapping, plan.group, plan.cp).flatten(0, 1))
