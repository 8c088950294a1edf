"""Fused Triton AttnRes depth mix: one program per token streams its sources once (online softmax over depth).

Sources come in two forms that one kernel serves: `NUM_BLOCKS` rows of a preallocated block buffer (one base
pointer plus a block stride) followed by `NUM_LISTED` separately allocated tensors passed as pointer slots
(`s0`..`s15`; unused slots repeat a valid pointer and are never read). The sources are taken TILE at a time (one
[TILE, D] load through a vector of per-row base pointers, one reduction for all their scores), and each tile is
loaded two tiles ahead of its use so that several row loads are in flight while the scores of the earlier ones
reduce. Calls of thousands of tokens run pipelined_kernel.py instead (`MixConfig.stages`), whose programs keep
several tiles in flight in shared memory across token boundaries; with the emitted norm, or rows too wide for a
pipelined tile, they run persistent_kernel.py (`MixConfig.persistent`), one tile ahead in registers. tiles.py holds
the steps they share. default_config chooses among them (bench/bench_attnres.py measures them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch._subclasses.fake_tensor import is_fake
from torch.fx.experimental.symbolic_shapes import statically_known_true

from dayzero.plugins import dependent_launch
from dayzero.plugins import device as device_info
from dayzero.plugins.attnres.persistent_kernel import attnres_mix_persistent_kernel
from dayzero.plugins.attnres.pipelined_kernel import attnres_mix_pipelined_kernel
from dayzero.plugins.attnres.sources import MAX_LISTED_SOURCES
from dayzero.plugins.attnres.tiles import load_tile, mix_tile, row_setup, store_mix
from dayzero.plugins.dependent_launch import wait_for_previous_kernel
from dayzero.plugins.output_buffer import output_like

# at most this many tokens per call is a decode step (latency-bound); more is prefill (bandwidth-bound)
DECODE_TOKENS = 64
# shared memory a default pipelined program may fill with tiles in flight
PIPELINE_BYTES = 96 * 1024


@triton.jit
def _attnres_mix_kernel(
    query, rms_weight, norm_weight, out, normed, blocks, block_stride,
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15,
    eps, norm_eps,
    D: tl.constexpr, BLOCK_D: tl.constexpr, NUM_BLOCKS: tl.constexpr, NUM_LISTED: tl.constexpr,
    EMIT_NORM: tl.constexpr, TILE: tl.constexpr, ALIGNED: tl.constexpr, PDL: tl.constexpr,
):
    wait_for_previous_kernel(PDL)
    NUM_SOURCES: tl.constexpr = NUM_BLOCKS + NUM_LISTED
    NUM_TILES: tl.constexpr = (NUM_SOURCES + TILE - 1) // TILE
    eps, norm_eps, cols, mask, w = row_setup(query, rms_weight, eps, norm_eps, D, BLOCK_D)
    row = tl.program_id(0).to(tl.int64) * D
    # int64 (row is) whether or not Triton specialized the integer argument into a constant
    stride = row * 0 + block_stride
    # a ring of two tiles in flight: a1 is consumed next, a2 follows
    a1 = load_tile(0, row, cols, mask, blocks, stride, TILE, NUM_BLOCKS, NUM_SOURCES, False, ALIGNED,
                   s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)
    a2 = a1
    if NUM_TILES > 1:
        a2 = load_tile(1, row, cols, mask, blocks, stride, TILE, NUM_BLOCKS, NUM_SOURCES, False, ALIGNED,
                       s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)
    m = tl.full([], float("-inf"), tl.float32)
    total = tl.zeros([], tl.float32)
    acc = tl.zeros([BLOCK_D], tl.float32)
    for t in tl.static_range(NUM_TILES):
        v = a1.to(tl.float32)
        # issue the next tile's loads before reducing this one
        a1 = a2
        if t + 2 < NUM_TILES:
            a2 = load_tile(t + 2, row, cols, mask, blocks, stride, TILE, NUM_BLOCKS, NUM_SOURCES, False, ALIGNED,
                           s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15)
        m, total, acc = mix_tile(v, w, t, m, total, acc, TILE, NUM_SOURCES, D, eps, True)
    store_mix(acc, total, out, normed, norm_weight, row, cols, mask, D, norm_eps, EMIT_NORM)


@dataclass(frozen=True)
class MixConfig:
    """How the kernels walk one token's sources: `tile` sources (a power of two) reduced together, `num_warps` per
    program. By default one program per token (kernel.py, two tiles in flight); `persistent` > 0 runs
    persistent_kernel.py instead, with that many programs per SM walking the tokens, one tile ahead across token
    boundaries; `stages` > 0 runs pipelined_kernel.py: `persistent` programs per SM, each with stages - 1 tiles copied
    ahead into shared memory. Both read their sources with evict-first loads (they outgrow the L2)."""

    tile: int
    num_warps: int
    persistent: int = 0
    stages: int = 0


def default_config(tokens, dim: int, num_sources: int, emit_norm: bool = False) -> MixConfig:
    """Launch settings measured on the H200 (bench/bench_attnres.py). Decode sizes (few tokens, latency-bound): one
    program per token, sources in pairs two tiles ahead, about 16 elements a thread. Larger calls (bandwidth-bound):
    the pipelined kernel with evict-first loads (the sources outgrow the L2): rows of up to 4096 elements in pairs
    with 2 tiles in flight (4 warps and 4 programs per SM for two sources, 2 warps and 8 per SM for more), wider rows
    one source at a time with 3 in flight, 4 warps, 4 per SM (100-101% of copy at 8 and 9 x 8192 x 7168 against
    77-78% with the register-prefetching kernels). With the emitted norm the pipelined kernel holds two more fp32 rows
    (167 registers at 8 warps in the sm_90 build) and is slower (551 us at 9 x 8192 x 7168 against 425 us): the
    persistent kernel, one tile ahead in registers, runs it.
    `tokens` may be symbolic (exported engines): the choice is made only where the traced range proves it, so it adds
    no guard."""
    block_d = triton.next_power_of_2(dim)
    # about 16 elements per thread per row: enough loads in flight without spilling the fp32 accumulator
    num_warps = max(1, min(16, block_d // 512))
    if statically_known_true(tokens <= DECODE_TOKENS):
        # one pair of sources is a single tile: more threads, less serial work a thread. Rows of up to 4096 lanes
        # take 16 elements a thread, wider ones 8 (2.3 / 2.7 us on 8 warps against 2.5 / 2.8 on 16 at
        # 2 x {1, 64} x 2304; 3.7 us on 32 warps against 3.8 on 16 at 2 x 64 x 7168)
        few_sources_warps = num_warps
        if num_sources <= 2:
            few_sources_warps = max(1, block_d // 512) if block_d <= 4096 else min(32, block_d // 256)
        return MixConfig(tile=2, num_warps=few_sources_warps)
    if emit_norm:
        if block_d <= 4096:
            return MixConfig(tile=2, num_warps=max(1, block_d // 2048), persistent=4)
        return MixConfig(tile=2, num_warps=num_warps, persistent=2)
    small_warps = max(1, min(4, block_d // 512))
    if block_d <= 4096:
        if num_sources <= 2:
            return MixConfig(tile=2, num_warps=small_warps, persistent=4, stages=3)
        # more tiles per token: twice the programs of half the warps keep more of them in flight (90.0% / 86.7% of
        # copy at 8 / 9 x 8192 x 2304 against 85.7% / 77.4%; 79.7% against 82.1% at two sources)
        return MixConfig(tile=2, num_warps=max(1, small_warps // 2), persistent=8, stages=3)
    # up to 3 tiles in flight within 96 KB of shared memory per program (fp32 sources); rows too wide for even one
    # stay with the persistent kernel
    in_flight = min(3, PIPELINE_BYTES // (block_d * 4))
    if in_flight == 0:
        return MixConfig(tile=1, num_warps=num_warps, persistent=1)
    return MixConfig(tile=1, num_warps=small_warps, persistent=4, stages=1 + in_flight)


def _check_pipeline_fits(config: MixConfig, lanes: int, like: torch.Tensor) -> None:
    limit = device_info.shared_memory_per_program(like.device)
    # Triton keeps stages - 1 tiles in flight, each [tile, lanes] of the sources' dtype
    need = (config.stages - 1) * config.tile * lanes * like.element_size()
    if limit is not None and need > limit:
        raise ValueError(f"attnres pipelined config {config}: {config.stages - 1} tiles of {config.tile} x {lanes} "
                         f"{like.dtype} need {need} bytes of shared memory, the GPU has {limit} per program; use "
                         "fewer stages or a smaller tile")


def _check_vector(name: str, t: torch.Tensor, dim: int) -> None:
    assert t.numel() == dim and t.is_contiguous(), f"{name} must be a contiguous [{dim}] vector, got {tuple(t.shape)}"


def sources_aligned(blocks: torch.Tensor, num_blocks: int, listed: Sequence[torch.Tensor]) -> bool:
    """Whether every source provably starts on a 16-byte boundary (the kernels then load 16 bytes at a time). Sizes may
    be symbolic in an exported engine: element offsets are checked without adding a guard, addresses where real."""
    starts = [(t, t.storage_offset()) for t in listed]
    if num_blocks:
        starts += [(blocks, blocks.storage_offset()), (blocks, blocks.stride(0))]
    item = blocks.element_size()
    return all(statically_known_true(offset * item % 16 == 0) and (is_fake(t) or t.data_ptr() % 16 == 0)
               for t, offset in starts)


def _launch(query, rms_weight, eps, blocks, num_blocks, listed, like, norm_weight, norm_eps, out, normed, launch):
    dim = like.shape[-1]
    tokens = like.numel() // dim
    _check_vector("query", query, dim)
    _check_vector("rms_weight", rms_weight, dim)
    out = output_like(out, like)
    normed = output_like(normed, like) if norm_weight is not None else None
    if norm_weight is not None:
        _check_vector("norm_weight", norm_weight, dim)
    if tokens == 0:
        return out, normed
    slots = list(listed) + [like] * (MAX_LISTED_SOURCES - len(listed))
    config = default_config(tokens, dim, num_blocks + len(listed), norm_weight is not None)
    common = (query, rms_weight, norm_weight if norm_weight is not None else rms_weight, out,
              normed if normed is not None else out, blocks, blocks.stride(0) if num_blocks else 0, *slots, eps,
              norm_eps)
    aligned = sources_aligned(blocks, num_blocks, listed)
    assert config.tile & (config.tile - 1) == 0, f"bad attnres config {config}"
    block_d = triton.next_power_of_2(dim)
    # PDL where a call is a few programs' latency (0.6-0.8 us of a 2.5-4.3 us decode call in graph replay)
    pdl = dependent_launch.pdl_mode(like, latency_bound=not (config.stages or config.persistent))
    pdl_options = dependent_launch.launch_options(pdl)
    # the interpreter has no SMs: 2 stand in, so that persistent programs still walk several tokens each
    sms = device_info.num_sms(like.device, cpu_default=2)
    if config.stages:
        _check_pipeline_fits(config, block_d, like)
        kernel = launch(attnres_mix_pipelined_kernel) if launch else attnres_mix_pipelined_kernel
        kernel[(sms * max(1, config.persistent),)](
            *common, tokens, dim, block_d, num_blocks, len(listed), norm_weight is not None, config.tile, aligned,
            config.stages, pdl, num_warps=config.num_warps, num_stages=config.stages, **pdl_options)
        return out, normed
    if config.persistent:
        kernel = launch(attnres_mix_persistent_kernel) if launch else attnres_mix_persistent_kernel
        kernel[(sms * config.persistent,)](*common, tokens, dim, block_d, num_blocks, len(listed),
                                           norm_weight is not None, config.tile, aligned, pdl,
                                           num_warps=config.num_warps, num_stages=1, **pdl_options)
        return out, normed
    kernel = launch(_attnres_mix_kernel) if launch else _attnres_mix_kernel
    kernel[(tokens,)](*common, dim, block_d, num_blocks, len(listed), norm_weight is not None, config.tile, aligned,
                      pdl, num_warps=config.num_warps, **pdl_options)
    return out, normed


def attnres_mix_launcher(
    query: torch.Tensor, sources: Sequence[torch.Tensor], rms_weight: torch.Tensor, eps: float,
    norm_weight: torch.Tensor | None = None, norm_eps: float = 1e-6, out: torch.Tensor | None = None,
    normed: torch.Tensor | None = None, launch=None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """query [D], 1..16 contiguous sources [..., D] of one dtype, rms_weight [D] -> (mix [..., D], normed or None).

    `normed` = RMSNorm(mix) * norm_weight, written only when norm_weight is given. `out` / `normed` may be given
    (preallocated, contiguous, the sources' shape and dtype); otherwise they are allocated.
    """
    assert 1 <= len(sources) <= MAX_LISTED_SOURCES, f"1..{MAX_LISTED_SOURCES} sources, got {len(sources)}"
    like = sources[0]
    for s in sources:
        assert s.shape == like.shape and s.dtype == like.dtype, "attnres sources differ in shape or dtype"
        assert s.is_contiguous() and s.device == like.device, "attnres sources must be contiguous on one device"
    return _launch(query, rms_weight, eps, like, 0, sources, like, norm_weight, norm_eps, out, normed, launch)


def attnres_mix_blocks_launcher(
    query: torch.Tensor, blocks: torch.Tensor, num_blocks: int, partial: torch.Tensor | None,
    rms_weight: torch.Tensor, eps: float, norm_weight: torch.Tensor | None = None, norm_eps: float = 1e-6,
    out: torch.Tensor | None = None, normed: torch.Tensor | None = None, launch=None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Mix over blocks[:num_blocks] (blocks [max_blocks, ..., D], each block contiguous) and partial [..., D]."""
    assert 0 <= num_blocks <= blocks.shape[0], f"num_blocks {num_blocks} outside [0, {blocks.shape[0]}]"
    assert num_blocks > 0 or partial is not None, "attnres_mix_blocks needs a block or a partial sum"
    assert blocks[0].is_contiguous(), "each block of the attnres block buffer must be contiguous"
    like = blocks[0]
    if partial is not None:
        assert partial.shape == like.shape and partial.dtype == like.dtype and partial.is_contiguous(), (
            f"partial {tuple(partial.shape)} {partial.dtype} does not match the blocks {tuple(like.shape)}")
    listed = [] if partial is None else [partial]
    return _launch(query, rms_weight, eps, blocks, num_blocks, listed, like, norm_weight, norm_eps, out, normed,
                   launch)
