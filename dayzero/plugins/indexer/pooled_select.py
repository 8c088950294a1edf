"""The indexer over pooled pages on the GPU: the pooled cache is an index cache of PAGE_SIZE / kpool keys a page when
kpool divides PAGE_SIZE (pool j is then key j % (PAGE_SIZE / kpool) of logical page j // (PAGE_SIZE / kpool)), so the
Top-K kernels (kernel.py) pick pools with each query's complete pools as its visible keys; expand_pools turns the
picks into positions and adds the unfinished pool (pooled_reference.expand_pools)."""

from __future__ import annotations

import torch

from dayzero.plugins.indexer.kernel import index_topk_paged_launcher
from dayzero.plugins.indexer.pooled_reference import expand_pools
from dayzero.plugins.paged_cache.reference import PAGE_SIZE


def kernel_serves(kpool: int) -> bool:
    """Whether the pools of kpool tokens lie whole in pages (GLM-5.3's 16 do); other sizes take the reference."""
    return PAGE_SIZE % kpool == 0


def pooled_index_topk_launcher(
    q: torch.Tensor, w: torch.Tensor, index_cache: torch.Tensor, block_table: torch.Tensor,
    cu_seqlens: torch.Tensor, positions: torch.Tensor, topk: int, kpool: int, scale: float | None = None,
    q_scales: torch.Tensor | None = None, launch=None, **sizes,
) -> torch.Tensor:
    """pooled_reference.pooled_index_topk_paged through the Top-K kernels (kpool dividing PAGE_SIZE); `sizes` go to
    index_topk_paged_launcher."""
    assert kernel_serves(kpool), f"the pooled Top-K kernels need kpool dividing {PAGE_SIZE}, got {kpool}"
    complete = (positions.long() + 1) // kpool
    # a query before its first complete pool is given pool 0 to see (a sequence whose queries all saw no key would
    # split its key range into none) and then keeps no pool
    pool_positions = (complete - 1).clamp(min=0).to(positions.dtype)
    pools = index_topk_paged_launcher(q, w, index_cache, block_table, cu_seqlens, pool_positions, topk // kpool,
                                      scale, q_scales, page=PAGE_SIZE // kpool, launch=launch, **sizes)
    return expand_pools(torch.where(complete[:, None] > 0, pools, -1), positions, kpool)
