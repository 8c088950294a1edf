"""Launch plans of the mHC kernels (kernel.py), without Triton.

A token count may be symbolic (an exported engine): a plan takes the decode range's largest count or, for prefill, a
fixed count of programs, so that no comparison on it becomes a guard.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch.fx.experimental.symbolic_shapes import statically_known_true

from dayzero.plugins.launch_sizes import cdiv, next_power_of_2

# at most this many tokens per call is a decode step (latency-bound); more is prefill (bandwidth-bound)
DECODE_TOKENS = 64
# programs a projection aims for: two per SM, so that one's loads overlap the other's reduction
PROGRAMS_PER_SM = 2
# SMs a plan assumes under the Triton interpreter (the CPU tests)
INTERPRETER_SMS = 2


@dataclass(frozen=True)
class ProjectPlan:
    """The projection's launch: `block_t` tokens a program (>= 16, the tensor cores' smallest tile), K in `splits`
    slices of `k_split` columns (a multiple of `block_k`, the columns one step loads)."""

    block_t: int
    block_k: int
    splits: int
    k_split: int
    num_warps: int
    num_stages: int


@dataclass(frozen=True)
class RowPlan:
    """The finish and post kernels' launch: per token, programs of `tiles` tiles of `block_d` columns each."""

    block_d: int
    tiles: int
    num_warps: int


def mix_width(hc: int) -> int:
    """The projection's columns (2 + HC) * HC rounded up to a power of two >= 16 (a tensor-core tile)."""
    return max(16, next_power_of_2((2 + hc) * hc))


def is_decode(tokens) -> bool:
    """Whether a call of `tokens` tokens is a decode step; a symbolic count only where its traced range proves it."""
    return statically_known_true(tokens <= DECODE_TOKENS)


def _token_blocks(tokens, block_t: int, decode: bool, sms: int) -> int:
    if isinstance(tokens, int):
        return cdiv(tokens, block_t)
    return DECODE_TOKENS // block_t if decode else PROGRAMS_PER_SM * sms


def _slices(length: int, block: int, token_blocks: int, sms: int) -> tuple[int, int]:
    """Cut `length` columns into slices of whole `block`s, as many as it takes for about PROGRAMS_PER_SM programs per
    SM with `token_blocks` blocks of tokens -> (slices, columns a slice)."""
    wanted = max(1, min(cdiv(length, block), PROGRAMS_PER_SM * sms // max(1, token_blocks)))
    per_slice = cdiv(cdiv(length, wanted), block) * block
    return cdiv(length, per_slice), per_slice


def project_plan(tokens, k: int, sms: int) -> ProjectPlan:
    """Decode: 16-token blocks, 128 columns a step, K cut so that about PROGRAMS_PER_SM programs per SM share the
    read of fn. Prefill: 64-token blocks (fn read once per 64 tokens), 64 columns a step, 4 steps in flight, K cut
    only where the blocks alone leave SMs idle."""
    decode = is_decode(tokens)
    block_t, block_k, num_stages = (16, 128, 2) if decode else (64, 64, 4)
    block_k = min(block_k, max(16, next_power_of_2(k)))
    num_slices, k_split = _slices(k, block_k, _token_blocks(tokens, block_t, decode, sms), sms)
    return ProjectPlan(block_t, block_k, num_slices, k_split, 4, num_stages)


def finish_plan(tokens, dim: int) -> RowPlan:
    """Decode: one program per tile of 256 columns (16 a token at D 4096), one warp, so that the Sinkhorn steps'
    reductions stay within the warp (no shared-memory round trip between warps on the step's latency path). Prefill:
    one program per token over all its tiles of 1024 columns, 4 warps: the coefficients computed once a token."""
    if is_decode(tokens):
        return RowPlan(min(256, next_power_of_2(dim)), 1, 1)
    block_d = min(1024, next_power_of_2(dim))
    return RowPlan(block_d, cdiv(dim, block_d), 4)


def post_plan(tokens, dim: int) -> RowPlan:
    """One program per tile: decode 512 columns (8 programs a token at D 4096, 4 elements a thread and row); prefill
    2048, 8 warps (8 a thread and row)."""
    block_d, num_warps = (512, 4) if is_decode(tokens) else (2048, 8)
    return RowPlan(min(block_d, next_power_of_2(dim)), 1, num_warps)
