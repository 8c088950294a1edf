"""Sparse prefill over an FP8 latent cache through a BF16 copy of the pages it reads.

In a long prefill every cached row is read by thousands of tokens (each reads its top-k), and the FP8 kernel decodes
a row to bf16 on each read: 218 TFLOP/s at T 32K, H128, where the BF16 cache gives 270 (bench README, sparse MLA
prefill). Decoding the pages the step reads once into a BF16 workspace, then running the BF16 kernel over it, takes
that work out of the key loop: at T 32K the workspace is 34K rows (39 MB), against 67M row reads.

The workspace's size depends on the step's indices, read on the host, so only eager calls take this path (a traced
or compiled prefill keeps the FP8 kernel), and only prefill-shaped ones whose workspace rows are few against their
row reads (never a decode step, which CUDA graphs capture).
"""

from __future__ import annotations

import torch

from dayzero.plugins.device import is_eager_cuda
from dayzero.plugins.paged_cache.formats import fp8_latent_nope_dim, is_quantized, unpack_fp8_latent
from dayzero.plugins.paged_cache.reference import PAGE_SIZE

# decoding a row once must save most of its reads: at most one workspace row per this many row reads
READS_PER_WORKSPACE_ROW = 8
# a decode / verify step has at most this many tokens a sequence; prefill steps above it may use the workspace
DECODE_TOKENS_PER_SEQ = 16
# memory the capacity plan does not count: at most 256K rows (302 MB at 576 bf16), decoded 1024 pages at a time
MAX_WORKSPACE_ROWS = 1 << 18
PAGES_PER_DECODE = 1024


def workspace_applies(q: torch.Tensor, latent_cache: torch.Tensor, cu_seqlens: torch.Tensor) -> bool:
    """An eager CUDA prefill over an FP8 cache with a bf16 query (the BF16 kernel's operand type)."""
    if not is_eager_cuda(q) or torch.cuda.is_current_stream_capturing() or q.dtype != torch.bfloat16:
        return False
    num_seqs = cu_seqlens.shape[0] - 1
    return is_quantized(latent_cache) and q.shape[0] > DECODE_TOKENS_PER_SEQ * max(num_seqs, 1)


def pages_read(indices: torch.Tensor, cu_seqlens: torch.Tensor) -> list[int]:
    """How many leading logical pages of each sequence its tokens' indices reach (-1 entries reach none)."""
    num_seqs = cu_seqlens.shape[0] - 1
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    seq_of_token = torch.repeat_interleave(torch.arange(num_seqs, device=indices.device), lengths)
    last = torch.full((num_seqs,), -1, dtype=torch.long, device=indices.device)
    last.scatter_reduce_(0, seq_of_token, indices.long().amax(dim=1), reduce="amax")
    return ((last + PAGE_SIZE) // PAGE_SIZE).tolist()


def bf16_pages(latent_cache: torch.Tensor, block_table: torch.Tensor, pages: list[int],
               rope_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first pages[n] pages of each sequence n, decoded -> (BF16 cache [sum(pages), 64, nope + rope], the block
    table into it [N, max(pages)])."""
    device = block_table.device
    physical = torch.cat([block_table[n, :count] for n, count in enumerate(pages)]).long()
    width = fp8_latent_nope_dim(latent_cache.shape[-1], rope_dim) + rope_dim
    rows = torch.empty(len(physical), PAGE_SIZE, width, dtype=torch.bfloat16, device=device)
    for first in range(0, len(physical), PAGES_PER_DECODE):
        part = physical[first : first + PAGES_PER_DECODE]
        records = latent_cache[part].view(-1, latent_cache.shape[-1])
        rows[first : first + len(part)] = unpack_fp8_latent(records, rope_dim, torch.bfloat16).view(len(part),
                                                                                                     PAGE_SIZE, -1)
    starts = torch.tensor([0, *pages[:-1]], device=device).cumsum(0)
    width = max(max(pages), 1)
    # entries past a sequence's own pages are never reached by its indices; kept inside the workspace all the same
    table = (starts[:, None] + torch.arange(width, device=device)[None, :]).clamp(max=len(physical) - 1)
    return rows, table.to(torch.int32)


def bf16_workspace(latent_cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens: torch.Tensor,
                   indices: torch.Tensor, rope_dim: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(BF16 pages, their block table) for a sparse prefill, or None where decoding them would not pay."""
    pages = pages_read(indices, cu_seqlens)
    rows = sum(pages) * PAGE_SIZE
    if not 0 < rows <= MAX_WORKSPACE_ROWS or rows * READS_PER_WORKSPACE_ROW > indices.numel():
        return None
    return bf16_pages(latent_cache, block_table, pages, rope_dim)
