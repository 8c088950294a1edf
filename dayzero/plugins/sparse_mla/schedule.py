"""Host-side plan of the MLA attention kernels: tile sizes, flash-decoding splits, the dense token-block schedule.

Plain torch (no triton), so tests and benchmarks can reason about a launch without compiling anything.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from dayzero.plugins import device as device_info
from dayzero.plugins.launch_sizes import next_power_of_2

# the H200 has 132 SMs; used where no CUDA device is asked about (the interpreter, tracing)
DEFAULT_NUM_SMS = 132
# heads per program that fill one Hopper warpgroup MMA (wgmma needs M to be a multiple of 64)
MMA_ROWS = 64


@dataclass(frozen=True)
class TileConfig:
    """One program computes `tokens_per_block * block_h` query rows (the M dim of both dots) over `block_n` keys."""

    block_h: int
    tokens_per_block: int
    block_n: int
    num_warps: int
    num_stages: int

    def __post_init__(self):
        for name in ("block_h", "tokens_per_block", "block_n"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"TileConfig.{name} must be a power of two, got {value}")
        if self.block_n < 16:
            raise ValueError(f"TileConfig.block_n must be >= 16 (tl.dot operand), got {self.block_n}")

    @property
    def rows(self) -> int:
        return self.block_h * self.tokens_per_block


def is_concrete(*values) -> bool:
    """True when no value is a symbolic size (torch.export tracing): only then may the plan branch on it."""
    return not any(isinstance(v, torch.SymInt) for v in values)


def tile_config(num_heads: int, q_dtype: torch.dtype, dense: bool, tokens_per_seq: int | None = None) -> TileConfig:
    """Default tiles. fp32 queries run the exact (non tensor-core) dot on small tiles; bf16/fp16 fill a wgmma."""
    if q_dtype == torch.float32:
        return TileConfig(block_h=16, tokens_per_block=1, block_n=16, num_warps=4, num_stages=1)
    block_h = MMA_ROWS if num_heads > MMA_ROWS // 2 else max(16, next_power_of_2(num_heads))
    tokens = 1
    if dense:
        tokens = MMA_ROWS // block_h if block_h < MMA_ROWS else 1
        if tokens_per_seq is not None:
            tokens = max(1, min(tokens, next_power_of_2(tokens_per_seq)))
    # 3 stages: the row gather runs two key blocks ahead (~184 KB of shared memory at 64 rows x 576 bf16).
    # 8 warps also for 16/32 rows: the [rows, 512] fp32 accumulator spills with 4 (sm_90 compile, triton 3.6)
    return TileConfig(block_h=block_h, tokens_per_block=tokens, block_n=32, num_warps=8, num_stages=3)


def sparse_tile_config(num_heads: int, q_dtype: torch.dtype, fp8_latent_rows: bool = False) -> TileConfig:
    """Tiles of sparse attention (one token per program): 64-key blocks gathered two stages deep. Measured on the H200,
    top-2048 (bench/bench_sparse_mla.py): prefill T8192 H128 BF16 17.1 ms (274 TFLOP/s) against 22.1 ms for 32-key
    blocks and 23.3 / 34.2 / 22.2 ms for 32 keys 2 deep, 16 keys 3 deep and 32 keys 4 deep; decode B64 at 32K context
    as CUDA-graph replays 0.210 / 0.175 / 0.126 / 0.107 ms at H128 FP8 / H128 BF16 / H64 FP8 / H64 BF16, against
    0.239 / 0.194 / 0.153 / 0.115 ms for tile_config's 32-key blocks three deep.

    `fp8_latent_rows`: FP8 records of the 512 + 64 latent row (656 bytes) take three stages, so one block's gather is
    in flight while the one before is scored (two stages wait for every copy before the dots: the sm_90 TTGIR has
    `async_wait {num = 0}`); 231 KB of shared memory, within the H200's 227 KiB. In graph replay 0.200 / 0.119 ms at
    H128 / H64 against 0.213 / 0.128 for two stages. A BF16 row (1152 bytes) does not fit three deep."""
    base = tile_config(num_heads, q_dtype, dense=False)
    if q_dtype == torch.float32:
        return base
    return replace(base, block_n=64, num_stages=3 if fp8_latent_rows else 2)


def num_splits(num_programs, num_keys: int, block_n: int, device: torch.device) -> int:
    """Flash-decoding: split each program's key list so that about one program runs per SM.

    With fewer programs than SMs each key list is cut into `SMs // programs` pieces of whole key blocks (at most
    one piece per block); otherwise 1 (no second pass). A symbolic program count (tracing) gets 1.
    """
    if not is_concrete(num_programs) or num_programs <= 0:
        return 1
    pieces = device_info.num_sms(device, DEFAULT_NUM_SMS) // num_programs
    return max(1, min(pieces, -(-num_keys // block_n)))


def sequence_of_tokens(cu_seqlens: torch.Tensor, num_tokens) -> torch.Tensor:
    """seq [T] int32: the sequence each flat token belongs to (sequence n owns [cu[n], cu[n+1]))."""
    tokens = torch.arange(num_tokens, device=cu_seqlens.device, dtype=cu_seqlens.dtype)
    # searches all of cu_seqlens, never the view cu_seqlens[1:]: torch 2.11's Inductor drops a view's offset in its
    # bucketize lowering, so an engine would search cu_seqlens[:-1] and give every token the next sequence (the last
    # one a block-table row past the end, an illegal address in the attention kernel)
    return (torch.searchsorted(cu_seqlens, tokens, right=True) - 1).to(torch.int32)


def dense_blocks(cu_seqlens: torch.Tensor, num_tokens, tokens_per_block: int):
    """(block_seq, block_first) int32 of the dense kernel's token blocks. A block a token (decode's tiles): the
    sequence of each token, as sparse attention has, in 4 launches where the general schedule takes over a dozen and
    twice the blocks; the kernel then takes a block's token from its index and reads no block_first."""
    if tokens_per_block == 1:
        seq = sequence_of_tokens(cu_seqlens, num_tokens)
        return seq, seq
    return dense_block_schedule(cu_seqlens, num_tokens, tokens_per_block)


def dense_block_schedule(cu_seqlens: torch.Tensor, num_tokens, tokens_per_block: int):
    """Blocks of up to `tokens_per_block` consecutive tokens of one sequence -> (block_seq, block_first) int32 [U].

    U = ceil(T / tokens_per_block) + N bounds the real block count without reading the lengths on the host;
    unused blocks have block_seq = -1.
    """
    num_seqs = cu_seqlens.shape[0] - 1
    lens = (cu_seqlens[1:] - cu_seqlens[:-1]).long()
    blocks = (lens + tokens_per_block - 1) // tokens_per_block
    ends = blocks.cumsum(0)
    upper = -(-num_tokens // tokens_per_block) + num_seqs
    ids = torch.arange(upper, device=cu_seqlens.device)
    seq = torch.searchsorted(ends, ids, right=True)
    used = seq < num_seqs
    seq = torch.where(used, seq, 0)
    first = cu_seqlens.long()[seq] + (ids - (ends[seq] - blocks[seq])) * tokens_per_block
    block_seq = torch.where(used, seq, -1).to(torch.int32)
    return block_seq, torch.where(used, first, 0).to(torch.int32)
