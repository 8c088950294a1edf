"""Host-side plan of the GQA attention kernel: tiles and flash-decoding splits (plain torch, no triton).

A program owns M = tokens * group query rows (the `group` query heads of one KV head, for `tokens` consecutive tokens
of one sequence: GQA heads stacked as the M dim of both dots, so each K / V tile is read once for the whole group)
and walks the sequence's keys in blocks of `block_n` rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dayzero.plugins import device as device_info
from dayzero.plugins.launch_sizes import next_power_of_2
from dayzero.plugins.sparse_mla.schedule import is_concrete

# query rows a prefill program aims at: 128 while the [rows, D] fp32 accumulator stays small, 64 for wide heads
PREFILL_ROWS, WIDE_PREFILL_ROWS, WIDE_HEAD = 128, 64, 128
# flash-decoding: programs per SM a split decode aims at (several, so that loads of one hide those of another)
PROGRAMS_PER_SM = 4
MAX_SPLITS = 64
# splits of a decode traced on a symbolic batch (an exported engine): its program count is unknown at trace time
TRACED_DECODE_SPLITS = 4
# the interpreter runs programs one after another: splitting gains nothing there
INTERPRETER_SMS = 1


@dataclass(frozen=True)
class TileConfig:
    tokens: int
    block_n: int
    num_warps: int
    num_stages: int

    def rows(self, group: int) -> int:
        """BLOCK_M: the program's query rows padded to a power of two (at least 16, a tl.dot operand)."""
        return max(16, next_power_of_2(self.tokens * group))


def prefill_tiles(group: int, head_dim: int, q_dtype: torch.dtype) -> TileConfig:
    """Tiles of a prefill; fp32 queries (exact dots, CPU tests) take small ones."""
    if q_dtype == torch.float32:
        return TileConfig(tokens=max(1, 16 // group), block_n=16, num_warps=4, num_stages=1)
    if head_dim > WIDE_HEAD:
        # 32-key blocks keep two stages of K and V (64 KB in bf16 at D = 256) beside the q tile in shared memory
        return TileConfig(tokens=max(1, WIDE_PREFILL_ROWS // group), block_n=32, num_warps=8, num_stages=2)
    return TileConfig(tokens=max(1, PREFILL_ROWS // group), block_n=64, num_warps=4, num_stages=2)


def decode_tiles(width: int, head_dim: int, q_dtype: torch.dtype) -> TileConfig:
    """Tiles of a decode step: one program per (sequence, KV head, split) holds all `width` tokens of its row."""
    if q_dtype == torch.float32:
        return TileConfig(tokens=width, block_n=16, num_warps=4, num_stages=1)
    # one 64-token page a key block; K and V of a block take 64 KB in bf16 at D = 256, and three stages of them fit
    # Hopper's shared memory: B64 over 32K keys at D 256 reads at 101% of copy, against 94.6% with two (H100)
    return TileConfig(tokens=width, block_n=64, num_warps=4, num_stages=3)


def num_splits(num_programs, num_keys, block_n: int, device: torch.device, traced: int = 1) -> int:
    """Pieces each program's key range is cut into, so that about PROGRAMS_PER_SM programs run per SM (at most one
    piece per key block); `traced` where the program count is symbolic (torch.export)."""
    if not is_concrete(num_programs, num_keys):
        return traced
    if num_programs <= 0:
        return 1
    target = PROGRAMS_PER_SM * device_info.num_sms(device, INTERPRETER_SMS)
    pieces = -(-target // num_programs)
    return max(1, min(pieces, -(-num_keys // block_n), MAX_SPLITS))
