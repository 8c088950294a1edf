"""The Triton GQA attention (prefill and decode) vs the reference over the plain and FP8 paged caches: query heads
in groups of 3, 1 and 8, head widths that are not powers of two, sequences crossing shuffled pages, chunked prefill
after cached context, speculative decode widths and flash-decoding splits (some of them empty).

Interpreter on CPU (tiny shapes), native on the GPU (`pytest -m gpu`, realistic shapes).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

from dayzero.plugins.gqa import op, plan
from dayzero.plugins.gqa import reference as R
from dayzero.plugins.gqa.cache_layout import write_kv
from dayzero.plugins.gqa.kernel import gqa_decode_launcher, gqa_prefill_launcher
from dayzero.plugins.paged_cache.reference import PAGE_SIZE
from tests.helpers import rel_err
from tests.plugins.test_gqa_cache_write import poisoned_cache
from tests.plugins.triton_env import DEVICE, ON_GPU, needs_triton, poisoned, sizes

pytestmark = needs_triton


@dataclass
class Scenario:
    """Sequences with `context` cached tokens each, of which the last `new` are this step's."""

    cache: torch.Tensor
    block_table: torch.Tensor
    cu_seqlens: torch.Tensor
    positions: torch.Tensor


def on_device(*tensors):
    return [t.to(DEVICE) for t in tensors]


def scenario(context: list[int], new: list[int], kv_heads: int, dim: int, fmt: str) -> Scenario:
    """Shuffled pages, a block table wider than needed (-1 past the end), random K / V, unwritten rows poisoned; on
    the test device (the reference runs there too)."""
    pages_per_seq = [-(-n // PAGE_SIZE) for n in context]
    num_pages = sum(pages_per_seq) + 2
    order = torch.randperm(num_pages)
    table = torch.full((len(context), max(pages_per_seq) + 1), -1, dtype=torch.int32)
    slots, used = [], 0
    for n, (length, count) in enumerate(zip(context, pages_per_seq)):
        table[n, :count] = order[used : used + count].int()
        used += count
        pos = torch.arange(length)
        slots.append(table[n, pos // PAGE_SIZE].long() * PAGE_SIZE + pos % PAGE_SIZE)
    cache = poisoned_cache(num_pages, kv_heads, dim, fmt).to(DEVICE)
    total = sum(context)
    k, v = (torch.randn(total, kv_heads, dim, device=DEVICE) for _ in range(2))
    write_kv(cache, k, v, torch.cat(slots).to(DEVICE))
    positions = torch.cat([torch.arange(c - m, c) for c, m in zip(context, new)])
    cu_seqlens = torch.tensor([0, *new]).cumsum(0).to(torch.int32)
    return Scenario(cache, *on_device(table, cu_seqlens, positions))


def tolerance(q_dtype: torch.dtype) -> float:
    """Exact fp32 dots, or bf16 operands (q, K / V, P rounded; fp32 accumulation)."""
    return 1e-5 if q_dtype == torch.float32 else 2e-2


PREFILL_CASES = sizes(
    cpu=[([67, 6], [40, 6], 6, 2, 80), ([130, 5], [9, 5], 3, 3, 72), ([66], [3], 8, 1, 16)],
    gpu=[([8192], [8192], 16, 2, 256), ([4000, 300, 2100], [1000, 300, 7], 24, 8, 128), ([900], [900], 12, 4, 80)])


# (cache format, query dtype): fp32 checks the exact path, bf16 the production one
FORMATS = [pytest.param(fmt, q_dtype, id=f"{fmt}-q{'fp32' if q_dtype == torch.float32 else 'bf16'}")
           for fmt, q_dtype in [("float32", torch.float32), ("bfloat16", torch.bfloat16), ("fp8", torch.float32),
                                ("fp8", torch.bfloat16)]]


@pytest.mark.parametrize("fmt, q_dtype", FORMATS)
@pytest.mark.parametrize("context, new, heads, kv_heads, dim", PREFILL_CASES)
def test_prefill_matches_the_reference(context, new, heads, kv_heads, dim, fmt, q_dtype):
    sc = scenario(context, new, kv_heads, dim, fmt)
    q = torch.randn(len(sc.positions), heads, dim, device=DEVICE).to(q_dtype)
    expected = R.gqa_prefill_paged(q.float(), sc.cache, sc.block_table, sc.cu_seqlens, sc.positions, dim ** -0.5)
    out = poisoned(*q.shape, dtype=q_dtype)
    # one split: test_prefill_after_long_context_splits_its_keys covers several
    gqa_prefill_launcher(q, sc.cache, sc.block_table, sc.cu_seqlens, sc.positions, dim ** -0.5, num_splits=1, out=out)
    assert rel_err(out.float(), expected) < tolerance(q_dtype)


@pytest.mark.parametrize("splits", [2, 5])
def test_prefill_after_long_context_splits_its_keys(splits):
    """A short chunk after a long context, split across programs: every split's partial result is merged."""
    sc = scenario([150, 40], [4, 3], 2, 40, "bfloat16")
    q = torch.randn(7, 6, 40, device=DEVICE)
    expected = R.gqa_prefill_paged(q, sc.cache, sc.block_table, sc.cu_seqlens, sc.positions, 0.2)
    out = poisoned(*q.shape)
    gqa_prefill_launcher(q, sc.cache, sc.block_table, sc.cu_seqlens, sc.positions, 0.2, num_splits=splits, out=out)
    assert rel_err(out, expected) < 1e-5


DECODE_CASES = sizes(
    cpu=[(3, 1, 6, 2, 80, [66, 5, 80]), (2, 3, 6, 2, 40, [64, 70]), (2, 2, 8, 1, 24, [17, 65])],
    gpu=[(64, 1, 16, 2, 256, [8192] * 64), (16, 4, 16, 2, 256, [5000 + 997 * i for i in range(16)]),
         (9, 3, 24, 8, 80, [300 + 1000 * i for i in range(9)])])


def decode_scenario(batch: int, width: int, kv_heads: int, dim: int, fmt: str, context: list[int]):
    """Each row's last `width` positions are its step; row 0 pads its last draft (the position repeated)."""
    sc = scenario(context, [width] * batch, kv_heads, dim, fmt)
    positions = sc.positions.view(batch, width).clone()
    if width > 1:
        positions[0, -1] = positions[0, -2]
    return sc, positions


@pytest.mark.parametrize("fmt, q_dtype", [FORMATS[0], FORMATS[3]])
@pytest.mark.parametrize("batch, width, heads, kv_heads, dim, context", DECODE_CASES)
def test_decode_matches_the_reference(batch, width, heads, kv_heads, dim, context, fmt, q_dtype):
    sc, positions = decode_scenario(batch, width, kv_heads, dim, fmt, context)
    q = torch.randn(batch, width, heads, dim, device=DEVICE).to(q_dtype)
    expected = R.gqa_decode_paged(q.float(), sc.cache, sc.block_table, positions, dim ** -0.5)
    out = poisoned(*q.shape, dtype=q_dtype)
    # four splits on the interpreter (the plan's split count, 1 on big grids, on the GPU)
    gqa_decode_launcher(q, sc.cache, sc.block_table, positions, dim ** -0.5, num_splits=None if ON_GPU else 4, out=out)
    assert rel_err(out.float(), expected) < tolerance(q_dtype)


def test_small_key_blocks_cross_pages_mid_block():
    """Key blocks smaller and larger than a page (16 and 128 rows) address each row through its own page."""
    sc, positions = decode_scenario(2, 2, 2, 32, "bfloat16", [150, 70])
    q = torch.randn(2, 2, 6, 32, device=DEVICE)
    expected = R.gqa_decode_paged(q, sc.cache, sc.block_table, positions, 0.3)
    for block_n in (16, 128):
        out = poisoned(*q.shape)
        gqa_decode_launcher(q, sc.cache, sc.block_table, positions, 0.3, block_n=block_n, num_splits=3, out=out)
        assert rel_err(out, expected) < 1e-5, block_n


def test_planned_launches_match_the_reference_and_their_fake_impls():
    """The default plan (many splits for a small grid), and what AOTInductor plans the outputs by."""
    sc, positions = decode_scenario(2, 2, 2, 40, "fp8", [70, 9])
    q_d = torch.randn(2, 2, 4, 40, device=DEVICE, dtype=torch.bfloat16)
    cache, table, pos = sc.cache, sc.block_table, positions
    expected = R.gqa_decode_paged(q_d.float(), cache, table, pos, 0.1)
    assert rel_err(gqa_decode_launcher(q_d, cache, table, pos, 0.1).float(), expected) < 2e-2
    for got, fake in [
        (gqa_decode_launcher(q_d, cache, table, pos, 0.1), op._decode_fake(q_d, cache, table, pos, 0.1)),
        (gqa_prefill_launcher(q_d[0], cache, table[:1], *on_device(torch.tensor([0, 2], dtype=torch.int32),
                                                                   positions[0]), 0.1),
         op._prefill_fake(q_d[0], cache, table[:1], None, None, 0.1)),
    ]:
        assert (got.shape, got.stride(), got.dtype) == (fake.shape, fake.stride(), fake.dtype)


def test_the_plan_splits_small_decode_grids_and_keeps_large_ones_whole(monkeypatch):
    monkeypatch.setattr(plan.device_info, "num_sms", lambda device, cpu_default: 132)
    device = torch.device("cuda")
    assert plan.num_splits(128, 32768, 64, device) == 5  # B64 x 2 KV heads on 132 SMs: ~4 programs an SM
    assert plan.num_splits(2, 32768, 64, device) == plan.MAX_SPLITS
    assert plan.num_splits(2, 100, 64, device) == 2  # at most one split a key block
    assert plan.num_splits(4096, 32768, 64, device) == 1
    env = ShapeEnv()
    seqs = env.create_symbol(64, ConstantSource("seqs"), dynamic_dim=DimDynamic.DYNAMIC)
    batch = env.create_symintnode(seqs, hint=64)
    assert plan.num_splits(batch * 2, 32768, 64, device, traced=plan.TRACED_DECODE_SPLITS) == 4
