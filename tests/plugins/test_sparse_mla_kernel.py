"""The Triton MLA attention (sparse Top-K and dense causal) vs the reference, over both latent cache formats.

Interpreter on CPU (tiny shapes), native on the GPU (`pytest -m gpu`, realistic shapes).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from dayzero.plugins.paged_cache.formats import latent_cache_shape, write_latent
from dayzero.plugins.paged_cache.reference import PAGE_SIZE
from dayzero.plugins.sparse_mla import reference as R
from dayzero.plugins.sparse_mla import schedule
from tests.helpers import rel_err
from tests.plugins.triton_env import DEVICE, ON_GPU, needs_triton, poisoned, sizes

pytestmark = needs_triton


@dataclass
class Scenario:
    """Sequences with `context` cached rows each, of which the last `new` are this step's tokens."""

    cache: torch.Tensor
    block_table: torch.Tensor
    cu_seqlens: torch.Tensor
    positions: torch.Tensor
    q: torch.Tensor


def poisoned_cache(num_pages: int, nope: int, rope: int, fmt: str) -> torch.Tensor:
    """Unwritten rows are NaN (FP8: all bytes 0xFF, NaN values and NaN scales), so reading one fails the test."""
    shape = latent_cache_shape(num_pages, nope, rope, quantized=fmt == "fp8")
    if fmt == "fp8":
        return torch.full(shape, 255, dtype=torch.uint8)
    return torch.full(shape, float("nan"), dtype=getattr(torch, fmt))


def scenario(context: list[int], new: list[int], H: int, nope: int, rope: int, fmt: str, q_dtype: torch.dtype,
             spare_pages: int = 3) -> Scenario:
    """Shuffled pages (wider block table than needed, -1 past the end), random rows, random queries."""
    pages_per_seq = [-(-n // PAGE_SIZE) for n in context]
    num_pages = sum(pages_per_seq) + spare_pages
    order = torch.randperm(num_pages)
    table = torch.full((len(context), max(pages_per_seq) + 1), -1, dtype=torch.int32)
    slots, used = [], 0
    for n, (length, count) in enumerate(zip(context, pages_per_seq)):
        table[n, :count] = order[used : used + count].int()
        used += count
        pos = torch.arange(length)
        slots.append(table[n, pos // PAGE_SIZE].long() * PAGE_SIZE + pos % PAGE_SIZE)
    cache = poisoned_cache(num_pages, nope, rope, fmt)
    write_latent(cache, torch.randn(sum(context), nope + rope), torch.cat(slots), rope)
    positions = torch.cat([torch.arange(c - m, c) for c, m in zip(context, new)])
    cu = torch.tensor([0, *new]).cumsum(0).to(torch.int32)
    return Scenario(cache, table, cu, positions, torch.randn(len(positions), H, nope + rope).to(q_dtype))


def random_indices(sc: Scenario, topk: int, blank_tokens: tuple[int, ...] = ()) -> torch.Tensor:
    """Per token a duplicate-free random subset of 0..pos (min(topk, pos+1) of them) at random slots, -1 elsewhere."""
    rows = []
    for t, pos in enumerate(sc.positions.tolist()):
        row = torch.full((topk,), -1, dtype=torch.int32)
        if t not in blank_tokens:
            count = min(topk, pos + 1)
            row[torch.randperm(topk)[:count]] = torch.randperm(pos + 1)[:count].int()
        rows.append(row)
    return torch.stack(rows)


def on_device(*tensors):
    return [t.to(DEVICE) for t in tensors]


def tolerance(q_dtype: torch.dtype) -> tuple[float, float]:
    """(o, lse) relative tolerances: exact fp32 dots, or bf16/fp16 operands (P and o rounded, fp32 accumulation)."""
    if q_dtype == torch.float32:
        return 1e-5, 1e-6
    return 2e-2, 5e-3


def assert_matches(got: tuple[torch.Tensor, torch.Tensor], expected: tuple[torch.Tensor, torch.Tensor], q_dtype):
    o, lse = (x.cpu() for x in got)
    ref_o, ref_lse = expected
    o_tol, lse_tol = tolerance(q_dtype)
    assert o.dtype == ref_o.dtype and lse.dtype == torch.float32
    assert torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse)), "rows with nothing visible differ"
    seen = ~torch.isneginf(ref_lse)
    assert not o.isnan().any() and not lse[seen].isnan().any()
    assert torch.equal(o[~seen], torch.zeros_like(o[~seen])), "rows with nothing visible must be 0"
    assert rel_err(o.float(), ref_o.float()) < o_tol
    assert rel_err(lse[seen], ref_lse[seen]) < lse_tol


def run_sparse(sc: Scenario, indices: torch.Tensor, v_dim: int, **kwargs):
    from dayzero.plugins.sparse_mla.kernel import sparse_mla_launcher

    T, H = sc.q.shape[:2]
    out = (poisoned(T, H, v_dim, dtype=sc.q.dtype), poisoned(T, H))
    q, cache, table, cu, idx = on_device(sc.q, sc.cache, sc.block_table, sc.cu_seqlens, indices)
    return sparse_mla_launcher(q, cache, table, cu, idx, sm_scale=0.7 / v_dim ** 0.5, v_dim=v_dim, out=out, **kwargs)


def run_dense(sc: Scenario, v_dim: int, **kwargs):
    from dayzero.plugins.sparse_mla.kernel import dense_mla_launcher

    T, H = sc.q.shape[:2]
    out = (poisoned(T, H, v_dim, dtype=sc.q.dtype), poisoned(T, H))
    q, cache, table, cu, pos = on_device(sc.q, sc.cache, sc.block_table, sc.cu_seqlens, sc.positions)
    return dense_mla_launcher(q, cache, table, cu, pos, sm_scale=0.7 / v_dim ** 0.5, v_dim=v_dim, out=out, **kwargs)


def sparse_reference(sc: Scenario, indices: torch.Tensor, v_dim: int):
    return R.sparse_mla_paged(sc.q, sc.cache, sc.block_table, sc.cu_seqlens, indices, 0.7 / v_dim ** 0.5, v_dim)


def dense_reference(sc: Scenario, v_dim: int):
    return R.dense_mla_paged(sc.q, sc.cache, sc.block_table, sc.cu_seqlens, sc.positions, 0.7 / v_dim ** 0.5, v_dim)


BF16, FP32 = torch.bfloat16, torch.float32

# (context per sequence, new tokens per sequence, H, nope, rope, topk, cache format, q dtype)
SPARSE_CASES = sizes(
    cpu=[
        ((100, 37), (1, 1), 16, 128, 64, 64, "fp8", BF16),
        ((150, 70, 5), (3, 3, 3), 12, 128, 64, 48, "bfloat16", BF16),
        ((60,), (40,), 5, 64, 16, 32, "float32", FP32),
        ((130, 20), (2, 2), 3, 48, 8, 40, "float32", BF16),
        ((70, 66), (1, 2), 96, 128, 64, 16, "fp8", FP32),
        ((90,), (2,), 20, 128, 64, 40, "fp8", torch.float16),
    ],
    gpu=[
        ((4096,) * 64, (1,) * 64, 128, 512, 64, 2048, "fp8", BF16),
        ((3000,) * 32, (2,) * 32, 64, 512, 64, 2048, "bfloat16", BF16),
        ((1500, 9000, 5, 300), (600, 8, 5, 300), 128, 512, 64, 2048, "bfloat16", BF16),
        ((2500, 700), (640, 700), 96, 512, 64, 2048, "fp8", BF16),
        ((5000,) * 8, (1,) * 8, 16, 512, 64, 2048, "fp8", BF16),
        ((3000, 200), (3, 3), 12, 512, 64, 256, "float32", FP32),
    ],
)


@pytest.mark.parametrize("context, new, H, nope, rope, topk, fmt, q_dtype", SPARSE_CASES)
def test_sparse_matches_reference(context, new, H, nope, rope, topk, fmt, q_dtype):
    sc = scenario(list(context), list(new), H, nope, rope, fmt, q_dtype)
    indices = random_indices(sc, topk)
    assert_matches(run_sparse(sc, indices, nope), sparse_reference(sc, indices, nope), q_dtype)


@pytest.mark.parametrize("num_splits", [1, 2, 5])
def test_sparse_split_key_lists_combine_exactly(num_splits):
    """Flash-decoding splits (including splits that get no key block) give the unsplit result."""
    sc = scenario([200, 90], [1, 2], 8, 128, 64, "fp8", FP32)
    indices = random_indices(sc, 96)
    assert_matches(run_sparse(sc, indices, 128, num_splits=num_splits), sparse_reference(sc, indices, 128), FP32)


def test_sparse_nothing_visible_gives_zero_and_neg_inf():
    """Tokens whose index row is all -1 (and a topk below one key block) attend to nothing."""
    sc = scenario([40, 10], [2, 1], 4, 64, 16, "bfloat16", BF16)
    indices = random_indices(sc, 8, blank_tokens=(0, 2))
    assert_matches(run_sparse(sc, indices, 64, num_splits=2), sparse_reference(sc, indices, 64), BF16)


def test_sparse_indexer_padding_at_the_end_is_not_visited():
    """The indexer's layout: min(topk, pos+1) valid indices first, -1 after; a split may get only padding."""
    sc = scenario([30, 200], [3, 1], 4, 128, 64, "fp8", FP32)
    indices = torch.full((4, 96), -1, dtype=torch.int32)
    for t, pos in enumerate(sc.positions.tolist()):
        count = min(96, pos + 1)
        indices[t, :count] = torch.randperm(pos + 1)[:count].int()
    assert_matches(run_sparse(sc, indices, 128, num_splits=3), sparse_reference(sc, indices, 128), FP32)


def test_sparse_int64_indices_and_tables():
    sc = scenario([70], [2], 4, 64, 16, "float32", FP32)
    indices = random_indices(sc, 24)
    sc.block_table = sc.block_table.long()
    assert_matches(run_sparse(sc, indices.long(), 64), sparse_reference(sc, indices, 64), FP32)


# (context per sequence, new tokens per sequence, H, nope, rope, cache format, q dtype)
DENSE_CASES = sizes(
    cpu=[
        ((70, 3, 100), (5, 3, 20), 2, 64, 16, "float32", FP32),
        ((100, 65), (1, 1), 12, 128, 64, "fp8", BF16),
        ((70,), (9,), 32, 64, 16, "bfloat16", BF16),
    ],
    gpu=[
        ((2048, 100, 2000), (2048, 100, 500), 32, 512, 64, "bfloat16", BF16),
        ((8000,) * 64, (1,) * 64, 32, 512, 64, "fp8", BF16),
        ((3000,) * 16, (3,) * 16, 16, 512, 64, "bfloat16", BF16),
        ((777, 300), (777, 5), 64, 512, 64, "fp8", BF16),
        ((500, 64), (100, 64), 8, 512, 64, "float32", FP32),
    ],
)


@pytest.mark.parametrize("context, new, H, nope, rope, fmt, q_dtype", DENSE_CASES)
def test_dense_matches_reference(context, new, H, nope, rope, fmt, q_dtype):
    sc = scenario(list(context), list(new), H, nope, rope, fmt, q_dtype)
    assert_matches(run_dense(sc, nope), dense_reference(sc, nope), q_dtype)


@pytest.mark.parametrize("num_splits", [1, 3])
def test_dense_splits_and_token_blocks(num_splits, monkeypatch):
    """Several tokens per program (block straddling the end of a sequence) and split key ranges: the token blocks
    tile_config gives a bf16 query of 16 heads, on exact fp32 inputs."""
    sc = scenario([75, 9, 100], [7, 9, 30], 4, 64, 16, "float32", FP32)
    config = schedule.tile_config(16, BF16, dense=True, tokens_per_seq=30)
    assert config.tokens_per_block == 4
    monkeypatch.setattr(schedule, "tile_config", lambda *args, **kwargs: config)
    assert_matches(run_dense(sc, 64, num_splits=num_splits), dense_reference(sc, 64), FP32)


def test_sparse_with_every_position_equals_dense():
    """Indices listing every earlier position (in shuffled order) give the dense causal result."""
    sc = scenario([50, 20], [4, 3], 6, 128, 64, "fp8", FP32)
    indices = random_indices(sc, 64)
    assert_matches(run_sparse(sc, indices, 128), dense_reference(sc, 128), FP32)


def test_dense_block_schedule_covers_every_token_once():
    cu = torch.tensor([0, 5, 5, 12, 13], dtype=torch.int32)
    block_seq, first = schedule.dense_block_schedule(cu, 13, 4)
    assert block_seq.shape == (-(-13 // 4) + 4,)
    covered = []
    for seq, start in zip(block_seq.tolist(), first.tolist()):
        if seq >= 0:
            end = int(cu[seq + 1])
            covered += [(seq, t) for t in range(start, min(start + 4, end))]
    assert sorted(covered) == [(0, t) for t in range(5)] + [(2, t) for t in range(5, 12)] + [(3, 12)]


def test_dense_blocks_of_one_token_are_the_tokens_sequences():
    cu = torch.tensor([0, 5, 5, 12, 13], dtype=torch.int32)
    block_seq, _ = schedule.dense_blocks(cu, 13, 1)
    assert block_seq.tolist() == [0] * 5 + [2] * 7 + [3]
    wide, first = schedule.dense_blocks(cu, 13, 4)
    assert torch.equal(wide, schedule.dense_block_schedule(cu, 13, 4)[0])


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_sequence_of_tokens_with_empty_sequences_and_padding_tokens(dtype):
    cu = torch.tensor([0, 5, 5, 12, 13], dtype=dtype)
    # tokens 13..15 pad the step past the last sequence: they belong to none (N)
    expected = [0] * 5 + [2] * 7 + [3] + [4] * 3
    assert schedule.sequence_of_tokens(cu, 16).tolist() == expected
    assert schedule.sequence_of_tokens(cu, 16).dtype == torch.int32


def test_num_splits_fill_the_sms_only_when_the_grid_is_small():
    cpu = torch.device("cpu")
    assert schedule.num_splits(64, 2048, 64, cpu) == schedule.DEFAULT_NUM_SMS // 64
    assert schedule.num_splits(1, 100, 64, cpu) == 2
    assert schedule.num_splits(500, 2048, 64, cpu) == 1


def test_host_plan_adds_no_guard_on_symbolic_sizes():
    """torch.export traces the launchers with symbolic token / sequence counts: nothing may specialize them."""
    from torch._dynamo.source import ConstantSource
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic

    from dayzero.plugins.sparse_mla.kernel import dense_mla_launcher, sparse_mla_launcher

    env = ShapeEnv()

    def size(name, hint):
        return env.create_symintnode(env.create_symbol(hint, ConstantSource(name), dynamic_dim=DimDynamic.DYNAMIC),
                                     hint=hint)

    grids = []

    def no_launch(kernel):
        return type("Grid", (), {"__getitem__": lambda self, grid: lambda *a, **k: grids.append(grid)})()

    with FakeTensorMode(shape_env=env):
        T, N = size("T", 7), size("N", 3)
        q = torch.empty(T, 16, 576, dtype=torch.bfloat16)
        cache = torch.empty(100, PAGE_SIZE, 656, dtype=torch.uint8)
        table, cu = torch.empty(N, 10, dtype=torch.int32), torch.empty(N + 1, dtype=torch.int32)
        o, lse = sparse_mla_launcher(q, cache, table, cu, torch.empty(T, 2048, dtype=torch.int32), 0.1, 512,
                                     launch=no_launch)
        dense_mla_launcher(q, cache, table, cu, torch.empty(T, dtype=torch.int64), 0.1, 512, launch=no_launch)
    assert str(o.shape[0]) == str(T) and str(lse.shape[0]) == str(T) and len(grids) == 3
    assert not env.guards, [str(g.expr) for g in env.guards]


def test_registered_ops_route_to_the_reference_on_cpu():
    from dayzero.plugins import sparse_mla

    sc = scenario([70, 9], [2, 1], 3, 64, 16, "float32", FP32)
    indices = random_indices(sc, 16)
    args = (sc.q, sc.cache, sc.block_table, sc.cu_seqlens)
    pos = sc.positions
    pairs = [(sparse_mla.sparse_mla_paged(*args, indices, 0.3, 64), R.sparse_mla_paged(*args, indices, 0.3, 64)),
             (sparse_mla.dense_mla_paged(*args, pos, 0.3, 64), R.dense_mla_paged(*args, pos, 0.3, 64))]
    for got, ref in pairs:
        assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])


@pytest.mark.gpu
@pytest.mark.skipif(not ON_GPU, reason="needs a CUDA GPU")
@pytest.mark.parametrize("fmt", ["fp8", "bfloat16"])
def test_registered_ops_run_the_kernel_on_gpu(fmt):
    from dayzero.plugins import sparse_mla

    sc = scenario([3000, 500], [4, 300], 64, 512, 64, fmt, BF16)
    indices = random_indices(sc, 2048)
    args = on_device(sc.q, sc.cache, sc.block_table, sc.cu_seqlens)
    o, lse = sparse_mla.sparse_mla_paged(*args, indices.to(DEVICE), 0.7 / 512 ** 0.5, 512)
    assert_matches((o, lse), sparse_reference(sc, indices, 512), BF16)
    o, lse = sparse_mla.dense_mla_paged(*args, sc.positions.to(DEVICE), 0.7 / 512 ** 0.5, 512)
    assert_matches((o, lse), dense_reference(sc, 512), BF16)


class _Attend(torch.nn.Module):
    def forward(self, q, cache, table, cu, indices, positions):
        o, lse = torch.ops.dayzero.sparse_mla_paged(q, cache, table, cu, indices, 0.25, 64)
        o2, _ = torch.ops.dayzero.dense_mla_paged(q, cache, table, cu, positions, 0.25, 64)
        return o + o2, lse


def _attend_inputs():
    import dayzero.plugins.sparse_mla  # noqa: F401  (registers the ops)

    sc = scenario([70, 9], [2, 1], 3, 64, 16, "bfloat16", FP32)
    return (sc.q, sc.cache, sc.block_table, sc.cu_seqlens, random_indices(sc, 16), sc.positions)


def test_export_sees_one_node_per_op_with_fake_shapes():
    args = _attend_inputs()
    tokens = torch.export.Dim("tokens", min=2)
    dynamic = ({0: tokens}, None, None, None, {0: tokens}, {0: tokens})
    program = torch.export.export(_Attend(), args, dynamic_shapes=dynamic)
    targets = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    assert targets.count("dayzero.sparse_mla_paged.default") == 1
    assert targets.count("dayzero.dense_mla_paged.default") == 1
    o, lse = program.module()(*args)
    assert o.shape == (3, 3, 64) and lse.shape == (3, 3)


def test_onnx_translation_emits_custom_domain_nodes():
    pytest.importorskip("onnxscript")
    from dayzero.plugins.registry import ONNX_DOMAIN, ONNX_TRANSLATIONS

    onnx_program = torch.onnx.export(_Attend(), _attend_inputs(), dynamo=True,
                                     custom_translation_table=ONNX_TRANSLATIONS)
    nodes = {n.op_type: n for n in onnx_program.model_proto.graph.node if n.domain == ONNX_DOMAIN}
    assert set(nodes) == {"sparse_mla_paged", "dense_mla_paged"}
    for node in nodes.values():
        assert len(node.input) == 5 and len(node.output) == 2
        attributes = {a.name: (a.f if a.name == "sm_scale" else a.i) for a in node.attribute}
        assert attributes == {"sm_scale": 0.25, "v_dim": 64}


def test_tile_config_puts_heads_on_the_mma_rows():
    assert schedule.tile_config(128, BF16, dense=False).rows == 64
    assert schedule.tile_config(12, BF16, dense=False).block_h == 16
    dense = schedule.tile_config(16, BF16, dense=True, tokens_per_seq=1000)
    assert (dense.block_h, dense.tokens_per_block) == (16, 4)
    assert schedule.tile_config(16, BF16, dense=True, tokens_per_seq=1).tokens_per_block == 1


def test_sparse_tiles_gather_64_key_blocks_two_stages_deep():
    narrow = schedule.tile_config(128, BF16, dense=False)
    wide = schedule.sparse_tile_config(128, BF16)
    assert (wide.block_n, wide.num_stages, wide.block_h) == (64, 2, narrow.block_h)
    # one head block too (graph replay: 0.107 against 0.115 ms for 32-key blocks at B64 H64 BF16)
    assert schedule.sparse_tile_config(64, BF16).block_n == 64
    assert schedule.sparse_tile_config(128, FP32).block_n == 16
    # FP8 latent rows one block deeper: a gather in flight while the block before is scored
    assert schedule.sparse_tile_config(128, BF16, fp8_latent_rows=True).num_stages == 3
