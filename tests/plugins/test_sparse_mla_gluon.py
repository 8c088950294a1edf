"""The Gluon sparse MLA decode over BF16 and FP8 caches (Hopper's default) vs the reference; its routing on the CPU.

The kernel itself runs only on an sm_90 GPU (`pytest -m gpu`); Gluon kernels have no CPU interpreter.
"""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.sparse_mla import gluon_decode_kernel as G
from dayzero.plugins.sparse_mla import op
from tests.plugins.recorded_launch import RecordedLaunch
from tests.plugins.test_sparse_mla_kernel import (
    BF16,
    assert_matches,
    on_device,
    random_indices,
    scenario,
    sparse_reference,
)
from tests.plugins.triton_env import ON_GPU, needs_triton, poisoned

pytestmark = needs_triton
ON_HOPPER = ON_GPU and torch.cuda.get_device_capability()[0] == 9
hopper_only = [pytest.mark.gpu, pytest.mark.skipif(not ON_HOPPER, reason="needs an sm_90 GPU (wgmma)")]
NOPE, ROPE = 512, 64
SM_SCALE = 0.7 / NOPE ** 0.5


def run_gluon(sc, indices: torch.Tensor, num_splits: int | None = None):
    T, H = sc.q.shape[:2]
    out = (poisoned(T, H, NOPE, dtype=BF16), poisoned(T, H))
    q, cache, table, cu, idx = on_device(sc.q, sc.cache, sc.block_table, sc.cu_seqlens, indices)
    return G.sparse_mla_decode_gluon_launcher(q, cache, table, cu, idx, SM_SCALE, NOPE, num_splits=num_splits,
                                              out=out)


# (context per sequence, new tokens per sequence, H, topk): 1, 7 and 64 sequences; contexts below topk leave -1
# holes at random slots; odd topk leaves a partial last key block; 33 keys fit in one block (FP8 records: their
# random tile scales and e4m3 subnormals come from the scenario's quantizer)
CASES = [
    ((4096,) * 64, (1,) * 64, 64, 2048),
    ((4096,) * 64, (1,) * 64, 128, 2048),
    ((3000, 1000, 5000, 70, 2500, 64, 4100), (1,) * 7, 64, 2047),
    ((3000, 1000, 5000, 70, 2500, 64, 4100), (1,) * 7, 128, 777),
    ((1500,), (1,), 128, 2048),
    ((900,) * 4, (2,) * 4, 64, 33),
]


@pytest.mark.parametrize("fmt", ["bfloat16", "fp8"])
@pytest.mark.parametrize("context, new, H, topk",
                         [pytest.param(*c, id=f"B{len(c[0])}-H{c[2]}-topk{c[3]}", marks=hopper_only) for c in CASES])
def test_gluon_decode_matches_reference(context, new, H, topk, fmt):
    sc = scenario(list(context), list(new), H, NOPE, ROPE, fmt, BF16)
    indices = random_indices(sc, topk)
    got = run_gluon(sc, indices)
    assert_matches(got, sparse_reference(sc, indices, NOPE), BF16)


@pytest.mark.parametrize("fmt", ["bfloat16", "fp8"])
@pytest.mark.parametrize("num_splits", [pytest.param(n, marks=hopper_only) for n in (1, 2, 5, 40)])
def test_gluon_decode_splits_and_blank_tokens(num_splits, fmt):
    """Explicit split counts (40: splits with no key block) and tokens whose index row is all -1."""
    sc = scenario([3000, 200, 2500], [1, 1, 1], 64, NOPE, ROPE, fmt, BF16)
    indices = random_indices(sc, 2047, blank_tokens=(1,))
    got = run_gluon(sc, indices, num_splits)
    assert_matches(got, sparse_reference(sc, indices, NOPE), BF16)


@pytest.mark.parametrize("fmt", ["bfloat16", "fp8"])
@pytest.mark.parametrize("heads", [pytest.param(h, marks=hopper_only) for h in (64, 128)])
def test_gluon_decode_replays_in_a_cuda_graph(heads, fmt):
    """The engine's decode runs as graph replays: a captured call gives the eager result, bit for bit, replay after
    replay."""
    sc = scenario([2000] * 8, [1] * 8, heads, NOPE, ROPE, fmt, BF16)
    q, cache, table, cu, idx = on_device(sc.q, sc.cache, sc.block_table, sc.cu_seqlens, random_indices(sc, 2048))
    eager = G.sparse_mla_decode_gluon_launcher(q, cache, table, cu, idx, SM_SCALE, NOPE)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        G.sparse_mla_decode_gluon_launcher(q, cache, table, cu, idx, SM_SCALE, NOPE)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = G.sparse_mla_decode_gluon_launcher(q, cache, table, cu, idx, SM_SCALE, NOPE)
    for _ in range(3):
        captured[0].fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured[0], eager[0]) and torch.equal(captured[1], eager[1])


@pytest.mark.parametrize("fmt", ["bfloat16", "fp8"])
@pytest.mark.parametrize("heads", [pytest.param(h, marks=hopper_only) for h in (64, 128)])
def test_registered_op_takes_the_gluon_path_by_default(heads, fmt, monkeypatch):
    calls = []
    launcher = G.sparse_mla_decode_gluon_launcher
    monkeypatch.setattr(G, "sparse_mla_decode_gluon_launcher", lambda *a, **k: calls.append(1) or launcher(*a, **k))
    monkeypatch.delenv(G.OPT_OUT_ENV, raising=False)
    sc = scenario([3000, 500], [1, 1], heads, NOPE, ROPE, fmt, BF16)
    indices = random_indices(sc, 2048)
    q, cache, table, cu, idx = on_device(sc.q, sc.cache, sc.block_table, sc.cu_seqlens, indices)
    got = op.sparse_mla_paged(q, cache, table, cu, idx, SM_SCALE, NOPE)
    assert calls == [1]
    assert_matches(got, sparse_reference(sc, indices, NOPE), BF16)
    monkeypatch.setenv(G.OPT_OUT_ENV, "0")
    op.sparse_mla_paged(q, cache, table, cu, idx, SM_SCALE, NOPE)
    assert calls == [1], "DAYZERO_SPARSE_MLA_GLUON=0 keeps the Triton kernel"


def test_cpu_calls_never_take_the_gluon_path(monkeypatch):
    """On the CPU (Triton interpreter) the op's kernel path gives the same bytes whatever the switch says."""
    sc = scenario([70, 9], [2, 1], 3, 64, 16, "bfloat16", BF16)
    indices = random_indices(sc, 16)
    impl = op.sparse_mla_paged.dayzero_impls["cuda"]
    args = (sc.q, sc.cache, sc.block_table, sc.cu_seqlens, indices, 0.3, 64)
    monkeypatch.setenv(G.OPT_OUT_ENV, "0")
    off = impl(*args)
    monkeypatch.delenv(G.OPT_OUT_ENV)
    assert not G.gluon_decode_applies(sc.q, sc.cache, 64)
    default = impl(*args)
    assert torch.equal(default[0], off[0]) and torch.equal(default[1], off[1])


@pytest.mark.skipif(not G.HAS_GLUON, reason="this Triton has no Gluon")
@pytest.mark.parametrize("fmt", ["bfloat16", "fp8"])
def test_the_launcher_picks_each_loops_kernel_block_and_constexprs(fmt, monkeypatch):
    """The launch the op's decode makes on Hopper, checked on the CPU: kernel, grid and every constexpr."""
    kernel = RecordedLaunch()
    monkeypatch.setattr(G, "_sparse_mla_decode_kernel", kernel)
    sc = scenario([3000, 200], [1, 1], 128, NOPE, ROPE, fmt, BF16)
    indices = random_indices(sc, 2047)
    G.sparse_mla_decode_gluon_launcher(sc.q, sc.cache, sc.block_table, sc.cu_seqlens, indices, SM_SCALE, NOPE,
                                       num_splits=1)
    assert len(kernel.calls) == 1
    grid, constexprs = kernel.calls[0]
    assert constexprs == dict(PAGE=64, ROW=sc.cache.shape[-1], DV=NOPE, DR=ROPE, BLOCK_H=64, SPLIT=False,
                              num_warps=G.NUM_WARPS, BLOCK_N=G.BLOCK_N, FP8=fmt == "fp8", TILE=128, ROW_SCAN=2048)
    assert grid == (2 * 2, 1) and constexprs["ROW"] == (G.FP8_RECORD if fmt == "fp8" else NOPE + ROPE)


@pytest.mark.skipif(not G.HAS_GLUON, reason="this Triton has no Gluon")
def test_split_launches_combine_after_the_kernel(monkeypatch):
    kernel, combines = RecordedLaunch(), []
    monkeypatch.setattr(G, "_sparse_mla_decode_kernel", kernel)
    monkeypatch.setattr(G, "combine_splits_launcher", lambda *args, **kwargs: combines.append(args))
    sc = scenario([3000, 200], [1, 1], 128, NOPE, ROPE, "bfloat16", BF16)
    G.sparse_mla_decode_gluon_launcher(sc.q, sc.cache, sc.block_table, sc.cu_seqlens, random_indices(sc, 2047),
                                       SM_SCALE, NOPE, num_splits=3)
    (grid, constexprs), = kernel.calls
    assert grid == (2 * 2, 3) and constexprs["SPLIT"] and len(combines) == 1
    assert combines[-1][0].dtype == torch.bfloat16 and combines[-1][0].shape == (3, 2, 128, NOPE)


@pytest.mark.skipif(not G.HAS_GLUON, reason="this Triton has no Gluon")
def test_routing_takes_only_decode_of_whole_head_blocks_over_512_plus_64_rows(monkeypatch):
    """The rule on a pretend eager Hopper tensor: shapes are all it reads (meta tensors, no data)."""
    monkeypatch.setattr(G, "is_eager_cuda", lambda q: True)
    monkeypatch.setattr(G, "_is_hopper", lambda device: True)

    def applies(tokens=64, heads=64, width=NOPE + ROPE, q_dtype=BF16, cache_dtype=BF16, v_dim=NOPE, row=None):
        q = torch.empty(tokens, heads, width, dtype=q_dtype, device="meta")
        cache = torch.empty(4, 64, row or width, dtype=cache_dtype, device="meta")
        return G.gluon_decode_applies(q, cache, v_dim)

    monkeypatch.delenv(G.OPT_OUT_ENV, raising=False)
    assert applies() and applies(heads=128) and applies(tokens=G.MAX_DECODE_TOKENS)
    assert applies(cache_dtype=torch.uint8, row=G.FP8_RECORD)
    monkeypatch.setenv(G.OPT_OUT_ENV, "0")
    assert not applies() and not applies(cache_dtype=torch.uint8, row=G.FP8_RECORD)
    monkeypatch.setenv(G.OPT_OUT_ENV, "1")
    assert applies()
    assert not applies(tokens=G.MAX_DECODE_TOKENS + 1)
    assert not applies(heads=32) and not applies(heads=96)
    assert not applies(cache_dtype=torch.uint8, row=G.FP8_RECORD + 16) and not applies(cache_dtype=torch.uint8)
    assert not applies(cache_dtype=torch.float16) and not applies(q_dtype=torch.float16)
    assert not applies(width=128 + 64, v_dim=128)
    padded = torch.empty(64, 64, NOPE + ROPE + 4, dtype=BF16, device="meta")[..., :NOPE + ROPE]
    assert not G.gluon_decode_applies(padded, torch.empty(4, 64, NOPE + ROPE, dtype=BF16, device="meta"), NOPE)
