"""Programmatic dependent launch: when it is taken, and that chains of dependent PDL kernels (each reading what the
one before wrote, captured in a CUDA graph as a decode step is) give exactly the results of plain launches."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins import dependent_launch
from tests.plugins.triton_env import ON_GPU, gpu_only, needs_triton

pytestmark = [needs_triton]


def test_pdl_is_early_for_latency_bound_gpu_launches_only(monkeypatch):
    assert dependent_launch.pdl_mode(torch.zeros(1), latency_bound=True) == dependent_launch.OFF
    assert dependent_launch.launch_options(dependent_launch.OFF) == {}
    assert dependent_launch.launch_options(dependent_launch.EARLY) == {"launch_pdl": True}
    if ON_GPU:
        gpu = torch.zeros(1, device="cuda")
        assert dependent_launch.pdl_mode(gpu, latency_bound=True) == dependent_launch.EARLY
        assert dependent_launch.pdl_mode(gpu, latency_bound=False) == dependent_launch.OFF
        monkeypatch.setenv(dependent_launch.ENV, "0")
        assert dependent_launch.pdl_mode(gpu, latency_bound=True) == dependent_launch.OFF


def test_pdl_is_off_while_tracing():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        assert not dependent_launch.pdl_available(torch.empty(4, device="cuda" if ON_GPU else "cpu"))


def test_pdl_mode_does_not_guard_a_symbolic_size():
    """While tracing, the latency test on a symbolic batch is never evaluated (a bool() of it would narrow the
    exported engine's batch range)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    shape_env = ShapeEnv()
    with FakeTensorMode(shape_env=shape_env) as mode:
        batch = shape_env.create_unbacked_symint()
        like = mode.from_tensor(torch.empty(4))
        assert dependent_launch.pdl_mode(like, latency_bound=batch * 32 < 1024) == dependent_launch.OFF
    assert not shape_env.guards


def _graph_of(step):
    """step() run once eagerly (compiles), then captured; returns the graph."""
    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def _pdl_taken(monkeypatch, mode: int) -> None:
    """Every launch takes PDL `mode`, latency-bound or not."""
    monkeypatch.setattr(dependent_launch, "pdl_mode", lambda like, latency_bound: mode)


def _attnres_chain(tokens: int, dim: int, emit_norm: bool) -> torch.Tensor:
    """Six mixes, each over the previous two outputs: a PDL kernel that read before the one before had finished
    would see a half-written source."""
    from dayzero.plugins.attnres.kernel import attnres_mix_launcher

    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = [torch.randn(tokens, dim, device="cuda", generator=gen).bfloat16() for _ in range(8)]
    query = torch.randn(dim, device="cuda", generator=gen)
    weight = torch.rand(dim, device="cuda", generator=gen) + 0.5
    norm_weight = weight if emit_norm else None
    normed = [torch.zeros_like(r) if emit_norm else None for r in rows]
    start = [r.clone() for r in rows]

    def step():
        for i in range(2, 8):
            attnres_mix_launcher(query, [rows[i - 1], rows[i - 2]], weight, 1e-6, norm_weight=norm_weight,
                                 out=rows[i], normed=normed[i])

    graph = _graph_of(step)
    for r, s in zip(rows, start):
        r.copy_(s)
    graph.replay()
    torch.cuda.synchronize()
    return torch.stack(rows + [n for n in normed if n is not None])


@pytest.mark.parametrize("tokens, dim, emit_norm", [
    pytest.param(*case, marks=gpu_only) for case in ((1, 2304, False), (64, 7168, False), (8192, 2304, False),
                                                     (8192, 7168, False), (4097, 2304, True))])
def test_attnres_chain_with_pdl_matches_plain_launches(tokens, dim, emit_norm, monkeypatch):
    _pdl_taken(monkeypatch, dependent_launch.EARLY)
    with_pdl = _attnres_chain(tokens, dim, emit_norm)
    _pdl_taken(monkeypatch, dependent_launch.OFF)
    assert torch.equal(with_pdl, _attnres_chain(tokens, dim, emit_norm))


def _kda_steps(batch: int, heads: int, fused: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Four decode steps of the same rows on one pool (each step reads the state the step before wrote)."""
    from dayzero.plugins.kda.recurrent_kernel import fused_kda_decode_launcher, recurrent_kda_pool_launcher

    gen = torch.Generator(device="cuda").manual_seed(1)
    dim, steps, width = 128, 4, 4

    def randn(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, device="cuda", generator=gen).to(dtype)

    slots = torch.randperm(2 * batch, device="cuda", generator=gen)[:batch].to(torch.int32).view(batch, 1)
    accepted = torch.ones(batch, device="cuda", dtype=torch.int32)
    state = randn(2 * batch, heads, dim, dim, dtype=torch.float32) * 0.1
    conv = randn(2 * batch, 3, width - 1, heads * dim)
    conv_weight = randn(3, heads * dim, width) / width
    a_log, dt_bias = randn(heads, dtype=torch.float32) * 0.5, randn(heads * dim, dtype=torch.float32)
    qkv, z, beta = randn(steps, batch, 1, 3, heads * dim), randn(steps, batch, 1, heads, dim), randn(steps, batch, 1,
                                                                                                     heads)
    q, k, v = (randn(steps, batch, 1, heads, dim) for _ in range(3))
    g = -torch.rand(steps, batch, 1, heads, dim, device="cuda", generator=gen)
    beta_gate = beta.float().sigmoid()
    out = torch.empty(steps, batch, 1, heads, dim, device="cuda", dtype=torch.bfloat16)
    start = (state.clone(), conv.clone())

    def step():
        for t in range(steps):
            if fused:
                fused_kda_decode_launcher(qkv[t], conv_weight, conv, z[t], a_log, dt_bias, None, beta[t], state,
                                          slots, accepted, out=out[t])
            else:
                recurrent_kda_pool_launcher(q[t], k[t], v[t], g[t], beta_gate[t], state, slots,
                                            accepted, use_qk_l2norm_in_kernel=True, out=out[t])

    graph = _graph_of(step)
    state.copy_(start[0])
    conv.copy_(start[1])
    graph.replay()
    torch.cuda.synchronize()
    return out, state


@pytest.mark.parametrize("batch, heads, fused", [
    pytest.param(*case, marks=gpu_only) for case in ((1, 32, False), (64, 32, False), (64, 32, True),
                                                     (256, 96, False))])
def test_kda_decode_steps_with_pdl_match_plain_launches(batch, heads, fused, monkeypatch):
    _pdl_taken(monkeypatch, dependent_launch.EARLY)
    with_pdl = _kda_steps(batch, heads, fused)
    _pdl_taken(monkeypatch, dependent_launch.OFF)
    without = _kda_steps(batch, heads, fused)
    assert torch.equal(with_pdl[0], without[0]) and torch.equal(with_pdl[1], without[1])
