"""Decode runners: CUDA graphs captured per batch bucket (1, 2, 4, 8, then multiples of 16), eager elsewhere.

A graph replays fixed addresses, so the decode inputs live in static buffers sized for the bucket; a batch of B
rows uses the smallest bucket >= B and pads the rest with rows that write nowhere real: slot_mapping -1, the dummy
page in the page table, the dummy state slot, position 0. Every decode step of an engine has the same width 1+d
(d = the manifest's num_draft; rows without enough drafts are padded inside the row).

Graphs are also captured per page-table width bucket (8K tokens of pages, then 4x steps, up to the engine's longest
sequence): attention and indexer kernels size their key splits by the table's width, and a graph keeps the launch
it was captured with, so one table as wide as a 1M-token engine would split a 512-token context as if it held 1M.
A step's table (as wide as its batch needs) fills the first columns of its bucket's and the dummy page the rest.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from dayzero.contract import StepEngine, StepMeta
from dayzero.runtime.block_manager import DUMMY_PAGE
from dayzero.runtime.state_pool import DUMMY_GROUP


def batch_buckets(max_batch: int) -> list[int]:
    small = [b for b in (1, 2, 4, 8) if b < max_batch]
    return [*small, *range(16, max_batch, 16), max_batch]


# pages of the narrowest page-table bucket (8K tokens in 64-token pages); each next bucket is WIDTH_STEP times wider
SMALLEST_TABLE_PAGES = 128
WIDTH_STEP = 4


def width_buckets(max_pages: int) -> list[int]:
    """Page-table widths graphs are captured for: SMALLEST_TABLE_PAGES times powers of WIDTH_STEP, then max_pages."""
    widths = [SMALLEST_TABLE_PAGES]
    while widths[-1] < max_pages:
        widths.append(widths[-1] * WIDTH_STEP)
    return [*widths[:-1], max_pages]


def bucket_for(size: int, buckets: list[int]) -> int:
    for bucket in buckets:
        if bucket >= size:
            return bucket
    raise ValueError(f"{size} exceeds the largest bucket {buckets[-1]}")


def pad_decode_inputs(input_ids: torch.Tensor, meta: StepMeta, rows: int) -> tuple[torch.Tensor, StepMeta]:
    """Pad a decode batch of [B, 1+d] tokens to `rows` sequences with rows that touch only the dummy page and slots
    (the flat per-token tensors grow by 1+d entries per padded row)."""
    pad = rows - input_ids.shape[0]
    if pad == 0:
        return input_ids, meta
    width = input_ids.shape[1]

    def extend(t: torch.Tensor, value: int, count: int = pad) -> torch.Tensor:
        return torch.cat([t, t.new_full((count, *t.shape[1:]), value)])

    padded = StepMeta(
        positions=extend(meta.positions, 0, pad * width),
        cu_seqlens=torch.cat([meta.cu_seqlens, meta.cu_seqlens[-1] + width * torch.arange(
            1, pad + 1, dtype=meta.cu_seqlens.dtype, device=meta.cu_seqlens.device)]),
        block_table=extend(meta.block_table, DUMMY_PAGE),
        slot_mapping=extend(meta.slot_mapping, -1, pad * width),
        state_slots=extend(meta.state_slots, DUMMY_GROUP),
        num_accepted=extend(meta.num_accepted, 1),
    )
    return extend(input_ids, 0), padded


class EagerDecode:
    def __init__(self, engine: StepEngine, caches: list[torch.Tensor], max_batch: int, max_pages: int):
        self.step_engine, self.caches = engine, caches

    def __call__(self, input_ids: torch.Tensor, meta: StepMeta) -> torch.Tensor:
        return self.step_engine.decode(input_ids, meta, self.caches)


class GraphDecode:
    """One captured graph per (batch bucket, page-table width bucket), captured on first use; the graphs share one
    memory pool."""

    def __init__(self, engine: StepEngine, caches: list[torch.Tensor], max_batch: int, max_pages: int):
        self.step_engine, self.caches = engine, caches
        self.buckets = batch_buckets(max_batch)
        self.widths = width_buckets(max_pages)
        self.graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor, StepMeta]] = {}
        # graph -> the columns of its static page table that hold real pages of an earlier step
        self.table_width: dict[tuple[int, int], int] = {}
        self.pool = None
        self.failed: dict[tuple[int, int], str] = {}

    def _capture(self, input_ids: torch.Tensor, meta: StepMeta):
        static_ids, static_meta = input_ids.clone(), StepMeta(**{k: v.clone() for k, v in vars(meta).items()})
        # warm up outside the graph (Triton compiles, allocator settles), on a side stream as capture requires
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self.step_engine.decode(static_ids, static_meta, self.caches)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = self.step_engine.decode(static_ids, static_meta, self.caches)
        self.pool = graph.pool()
        return graph, static_ids, out, static_meta

    def __call__(self, input_ids: torch.Tensor, meta: StepMeta) -> torch.Tensor:
        batch = input_ids.shape[0]
        key = bucket_for(batch, self.buckets), bucket_for(meta.block_table.shape[1], self.widths)
        input_ids, meta = pad_decode_inputs(input_ids, meta, key[0])
        if key in self.failed:
            return self.step_engine.decode(input_ids, meta, self.caches)[:batch]
        if key not in self.graphs:
            out = self.step_engine.decode(input_ids, meta, self.caches)
            try:
                self.graphs[key] = self._capture_without_side_effects(key, input_ids, meta)
            except RuntimeError as err:
                # an engine whose decode syncs with the host cannot be captured: it keeps running eagerly
                self.failed[key] = str(err).splitlines()[0]
                warnings.warn(f"CUDA-graph capture of the decode step failed at batch {key[0]}, {key[1]} pages "
                              f"({self.failed[key]}); decoding eagerly", stacklevel=2)
            return out[:batch]
        graph, static_ids, out, static_meta = self.graphs[key]
        static_ids.copy_(input_ids)
        for name, value in vars(meta).items():
            if name != "block_table":
                getattr(static_meta, name).copy_(value)
        self._fill_table(key, static_meta.block_table, meta.block_table)
        graph.replay()
        return out[:batch]

    def _fill_table(self, key: tuple[int, int], static: torch.Tensor, table: torch.Tensor) -> None:
        """The step's table into the first columns of the static one; the dummy page where earlier steps' wider
        tables left real pages."""
        width, stale = table.shape[1], self.table_width.get(key, 0)
        static[:, :width].copy_(table)
        if stale > width:
            static[:, width:stale].fill_(DUMMY_PAGE)
        self.table_width[key] = width

    def _capture_without_side_effects(self, key: tuple[int, int], input_ids: torch.Tensor, meta: StepMeta):
        """Capture with every row padded (writes go to the dummy page / slot only), so real caches stay as they are."""
        rows, width = key
        dummy_ids, dummy_meta = pad_decode_inputs(input_ids[:0], _empty_like(meta, width), rows)
        return self._capture(dummy_ids, dummy_meta)


def _empty_like(meta: StepMeta, max_pages: int) -> StepMeta:
    """No rows, with a page table max_pages wide."""
    block_table = meta.block_table.new_empty((0, max_pages))
    return StepMeta(positions=meta.positions[:0], cu_seqlens=meta.cu_seqlens[:1], block_table=block_table,
                    slot_mapping=meta.slot_mapping[:0], state_slots=meta.state_slots[:0],
                    num_accepted=meta.num_accepted[:0])


# device type -> decode runner
DECODE_RUNNERS: dict[str, Callable[..., EagerDecode | GraphDecode]] = {"cpu": EagerDecode, "cuda": GraphDecode}


def decode_runner(engine: StepEngine, caches: list[torch.Tensor], max_batch: int, max_pages: int,
                  use_graphs: bool = True):
    kind = torch.device(engine.manifest.device).type if use_graphs else "cpu"
    return DECODE_RUNNERS.get(kind, EagerDecode)(engine, caches, max_batch, max_pages)
