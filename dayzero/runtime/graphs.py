"""Decode runners: CUDA graphs captured per batch bucket (1, 2, 4, 8, then multiples of 16), eager elsewhere.

A graph replays fixed addresses, so the decode inputs live in static buffers sized for the bucket; a batch of B
rows uses the smallest bucket >= B and pads the rest with rows that write nowhere real: slot_mapping -1, the dummy
page in the page table, the dummy state slot, position 0. The static page table is as wide as the engine's longest
sequence; a step's table (as wide as its batch needs) fills its first columns and the dummy page the rest.
Every decode step of an engine has the same width 1+d (d = the manifest's num_draft; rows without enough drafts are
padded inside the row), so buckets are by batch only.
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


def bucket_for(batch: int, buckets: list[int]) -> int:
    for bucket in buckets:
        if bucket >= batch:
            return bucket
    raise ValueError(f"batch {batch} exceeds the largest bucket {buckets[-1]}")


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
    """One captured graph per bucket, sharing the static buffers of the largest bucket (views for smaller ones)."""

    def __init__(self, engine: StepEngine, caches: list[torch.Tensor], max_batch: int, max_pages: int):
        self.step_engine, self.caches, self.max_pages = engine, caches, max_pages
        self.buckets = batch_buckets(max_batch)
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor, StepMeta]] = {}
        # bucket -> the columns of its static page table that hold real pages of an earlier step
        self.table_width: dict[int, int] = {}
        self.pool = None
        self.failed: dict[int, str] = {}

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
        rows = bucket_for(batch, self.buckets)
        input_ids, meta = pad_decode_inputs(input_ids, meta, rows)
        if rows in self.failed:
            return self.step_engine.decode(input_ids, meta, self.caches)[:batch]
        if rows not in self.graphs:
            out = self.step_engine.decode(input_ids, meta, self.caches)
            try:
                self.graphs[rows] = self._capture_without_side_effects(rows, input_ids, meta)
            except RuntimeError as err:
                # an engine whose decode syncs with the host cannot be captured: it keeps running eagerly
                self.failed[rows] = str(err).splitlines()[0]
                warnings.warn(f"CUDA-graph capture of the decode step failed at batch {rows} ({self.failed[rows]}); "
                              "decoding eagerly", stacklevel=2)
            return out[:batch]
        graph, static_ids, out, static_meta = self.graphs[rows]
        static_ids.copy_(input_ids)
        for name, value in vars(meta).items():
            if name != "block_table":
                getattr(static_meta, name).copy_(value)
        self._fill_table(rows, static_meta.block_table, meta.block_table)
        graph.replay()
        return out[:batch]

    def _fill_table(self, rows: int, static: torch.Tensor, table: torch.Tensor) -> None:
        """The step's table into the first columns of the static one; the dummy page where earlier steps' wider
        tables left real pages."""
        width, stale = table.shape[1], self.table_width.get(rows, 0)
        static[:, :width].copy_(table)
        if stale > width:
            static[:, width:stale].fill_(DUMMY_PAGE)
        self.table_width[rows] = width

    def _capture_without_side_effects(self, rows: int, input_ids: torch.Tensor, meta: StepMeta):
        """Capture with every row padded (writes go to the dummy page / slot only), so real caches stay as they are."""
        dummy_ids, dummy_meta = pad_decode_inputs(input_ids[:0], _empty_like(meta, self.max_pages), rows)
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
