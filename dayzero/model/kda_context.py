"""KDA across context-parallel ranks (docs/architecture.md, "Context parallelism").

A rank holds chunks of each sequence, not the sequence. What it needs from the chunks before its own is the state
and the short-conv window they leave behind:
* state: each chunk maps its entry state affinely, S_out = M S_in + B. The ranks share their chunks' (M, B)
  (H·K·(K+V) fp32 a chunk, whatever its length) and every rank folds them in sequence order from the sequence's
  slot, which gives each chunk's entry state and the sequence's exit state — exact for any split.
* window: the last W−1 pre-conv rows before a chunk. The ranks share each chunk's last W−1 rows; a chunk shorter
  than that passes on part of the window it entered with.
Every rank ends with the same exit state and window, written to the sequence's slot, so decode can run anywhere.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from dayzero.contract import StepMeta
from dayzero.model.collectives import gather_ranks
from dayzero.model.step import KDACache
from dayzero.model.zigzag import LOCAL_CHUNKS, ContextShard
from dayzero.plugins import kda as kda_ops
from dayzero.plugins import short_conv


def _sequence_order(gathered: torch.Tensor, shard: ContextShard) -> torch.Tensor:
    """[cp, N * 2, ...] as the ranks sent them -> [N, 2cp, ...], each sequence's chunks in order."""
    cp = shard.plan.cp
    owners = [shard.owner(chunk) for chunk in range(2 * cp)]
    ranks = torch.tensor([rank for rank, _ in owners], device=gathered.device)
    local = torch.tensor([j for _, j in owners], device=gathered.device)
    grid = gathered.view(cp, shard.num_seqs, LOCAL_CHUNKS, *gathered.shape[2:])
    return grid[ranks, :, local].transpose(0, 1)


def _exchange(per_segment: torch.Tensor, empty: torch.Tensor, shard: ContextShard) -> torch.Tensor:
    """This rank's values of its real segments [S, ...] -> every sequence's chunks [N, 2cp, ...], an empty chunk
    holding `empty` [...]."""
    grid = empty.expand(shard.num_seqs * LOCAL_CHUNKS, *empty.shape).clone()
    grid[shard.cells] = per_segment
    return _sequence_order(gather_ranks(grid, shard.plan.group, shard.plan.cp), shard)


def entry_states(M: torch.Tensor, B: torch.Tensor, initial: torch.Tensor,
                 shard: ContextShard) -> tuple[torch.Tensor, torch.Tensor]:
    """Summaries of the real local segments M [S, H, K, K], B [S, H, K, V]; the sequences' slot states initial
    [N, H, K, V] -> (entry state of each real local segment [S, H, K, V], exit state of each sequence [N, H, K, V]),
    fp32."""
    dim_k = M.shape[-1]
    identity = torch.cat([torch.eye(dim_k, device=M.device).expand(M.shape[1], dim_k, dim_k),
                          B.new_zeros(B.shape[1:])], dim=-1)
    chunks = _exchange(torch.cat([M, B], dim=-1).float(), identity.float(), shard)  # [N, 2cp, H, K, K + V]
    state, entries = initial.float(), []
    for chunk in range(chunks.shape[1]):
        entries.append(state)
        state = chunks[:, chunk, ..., :dim_k] @ state + chunks[:, chunk, ..., dim_k:]
    return torch.stack(entries, dim=1).flatten(0, 1)[shard.chunks], state


def segment_tails(rows: torch.Tensor, cu_seqlens: torch.Tensor, count: int, keep: int) -> torch.Tensor:
    """The last `keep` rows of each of the first `count` segments of rows [T, ...], right-aligned, zero where a
    segment is shorter -> [count, keep, ...]."""
    starts, ends = cu_seqlens[:count].long(), cu_seqlens[1 : count + 1].long()
    index = ends[:, None] - keep + torch.arange(keep, device=rows.device)[None, :]
    inside = (index >= starts[:, None]).view(count, keep, *[1] * (rows.dim() - 1))
    return rows[index.clamp(min=0)] * inside


def _shift_in(window: torch.Tensor, tail: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
    """window, tail [N, W-1, ...]; a chunk of `length` [N] rows whose last ones are `tail` -> the window after it."""
    keep = window.shape[1]
    source = torch.arange(keep, device=window.device)[None, :] + length.clamp(max=keep)[:, None]  # [N, W-1]
    old = source < keep
    index = source.clamp(max=keep - 1).view(*source.shape, *[1] * (window.dim() - 2)).expand_as(window)
    return torch.where(old.view(*old.shape, *[1] * (window.dim() - 2)), window.gather(1, index), tail)


def entry_windows(tails: torch.Tensor, lengths: torch.Tensor, initial: torch.Tensor,
                  shard: ContextShard) -> tuple[torch.Tensor, torch.Tensor]:
    """Tails of the real local segments [S, W-1, ...]; every sequence's chunk lengths [N, 2cp]; the sequences' slot
    windows initial [N, W-1, ...] -> (entry window of each real local segment [S, W-1, ...], exit window of each
    sequence [N, W-1, ...])."""
    chunks = _exchange(tails, tails.new_zeros(tails.shape[1:]), shard)  # [N, 2cp, W-1, ...]
    window, entries = initial, []
    for chunk in range(chunks.shape[1]):
        entries.append(window)
        window = _shift_in(window, chunks[:, chunk], lengths[:, chunk])
    return torch.stack(entries, dim=1).flatten(0, 1)[shard.chunks], window


def prefill_across_ranks(pre_conv: torch.Tensor, conv_weight: torch.Tensor, recurrence_inputs: Callable,
                         meta: StepMeta, cache: KDACache, shard: ContextShard) -> torch.Tensor:
    """A KDA-family layer's prefill of this rank's chunks: the windows and states that enter them from the other ranks'
    summaries, then the short conv of pre_conv [T, ..., C] and the chunked recurrence from those; the sequences' exit
    state and window written to their slots. recurrence_inputs: the conv's output -> (q, k, v, g, beta) as chunk_kda
    takes them. -> o [T, H, V]."""
    segments, real = meta.cu_seqlens.shape[0] - 1, shard.cells.numel()
    windows, exit_window = entry_windows(segment_tails(pre_conv, meta.cu_seqlens, real, conv_weight.shape[-1] - 1),
                                         shard.chunk_lengths, cache.conv[shard.seq_slots].transpose(1, 2), shard)
    pool = torch.cat([windows, windows.new_zeros(segments - real, *windows.shape[1:])]).transpose(1, 2)
    conv = short_conv.short_conv_prefill(pre_conv, conv_weight, pool.contiguous(), meta.cu_seqlens,
                                         torch.arange(segments, dtype=torch.int32, device=pre_conv.device))
    q, k, v, g, beta = recurrence_inputs(conv)
    M, B = kda_ops.kda_summary(k, v, g, beta, use_qk_l2norm_in_kernel=True, cu_seqlens=meta.cu_seqlens)
    states, exit_state = entry_states(M[:real], B[:real], cache.state[shard.seq_slots], shard)
    initial = torch.cat([states, states.new_zeros(segments - real, *states.shape[1:])])
    o, _ = kda_ops.chunk_kda(q, k, v, g, beta, initial_state=initial, use_qk_l2norm_in_kernel=True,
                             cu_seqlens=meta.cu_seqlens)
    cache.state.index_copy_(0, shard.seq_slots, exit_state.to(cache.state.dtype))
    cache.conv.index_copy_(0, shard.seq_slots, exit_window.transpose(1, 2).to(cache.conv.dtype))
    return o[0]
