"""The mHC reference against transformers' GLM-5.3-Flash hyper-connection, and the fused Triton kernels against the
reference (interpreter on CPU, native on the GPU)."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.mhc import reference
from tests.helpers import rel_err
from tests.plugins.triton_env import DEVICE, ON_GPU, gpu_only, needs_triton, poisoned, sizes

# the CPU interpreter truncates fp32 -> bf16 where the GPU rounds to nearest, hence the loose bf16 bound
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
NORM_EPS, HC_EPS = 1e-5, 1e-6


def _weights(hc: int, dim: int, fn_dtype=torch.float32, device=DEVICE):
    """fn, base, scale of one hyper-connection: large enough that pre / post / comb are far from uniform."""
    m = (2 + hc) * hc
    fn = (torch.randn(m, hc * dim, device=device) * 2 / (hc * dim) ** 0.5).to(fn_dtype)
    return fn, torch.randn(m, device=device), torch.rand(3, device=device) + 0.5


def _streams(tokens: int, hc: int, dim: int, dtype, device=DEVICE) -> torch.Tensor:
    # streams of different scales and offsets
    scales = torch.arange(1, hc + 1, device=device, dtype=torch.float32)[:, None]
    return (torch.randn(tokens, hc, dim, device=device) * scales + 0.1 * scales).to(dtype)


def _glm5_hyper_connection(hc: int, dim: int, iters: int):
    glm5 = pytest.importorskip("transformers.models.glm5_next.modeling_glm5_next")
    config = pytest.importorskip("transformers.models.glm5_next.configuration_glm5_next").Glm5NextTextConfig(
        hc_mult=hc, hidden_size=dim, hc_sinkhorn_iters=iters, rms_norm_eps=NORM_EPS, hc_eps=HC_EPS)
    module = glm5.Glm5NextTextHyperConnection(config)
    fn, base, scale = _weights(hc, dim, device="cpu")
    with torch.no_grad():
        module.fn.copy_(fn)
        module.base.copy_(base)
        module.scale.copy_(scale)
    return module, glm5


def _transformers_post(post, comb, out, residual):
    """Glm5NextTextDecoderLayer's step after each sublayer (transformers inlines it in the layer's forward)."""
    dtype = residual.dtype
    return post.to(dtype).unsqueeze(-1) * out.unsqueeze(-2) + torch.matmul(comb.to(dtype).transpose(-1, -2), residual)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_matches_transformers_hyper_connection(dtype):
    module, _ = _glm5_hyper_connection(hc=3, dim=40, iters=5)
    streams = _streams(10, 3, 40, dtype, device="cpu")
    with torch.no_grad():
        post, comb, collapsed = module(streams.view(2, 5, 3, 40))
    got = reference.mhc_pre(streams, module.fn, module.base, module.scale, NORM_EPS, HC_EPS, 5)
    assert rel_err(got[0], collapsed.view(10, 40)) < TOLERANCE[dtype]
    assert rel_err(got[1], post.view(10, 3)) < 1e-5 and rel_err(got[2], comb.view(10, 3, 3)) < 1e-5
    out = torch.randn(10, 40).to(dtype)
    expected = _transformers_post(post.view(10, 3), comb.view(10, 3, 3), out, streams)
    assert rel_err(reference.mhc_post(out, streams, got[1], got[2]), expected) < TOLERANCE[dtype]


def test_reference_head_is_transformers_mean_of_the_streams():
    _, glm5 = _glm5_hyper_connection(hc=3, dim=40, iters=5)
    streams = _streams(2, 3, 40, torch.float32, device="cpu")
    assert rel_err(reference.mhc_head(streams), glm5.Glm5NextTextHyperHead()(streams.unsqueeze(0))[0]) < 1e-6


def test_comb_is_doubly_stochastic_after_enough_sinkhorn_steps():
    fn, base, scale = _weights(4, 24, device="cpu")
    _, _, comb = reference.mhc_coefficients(_streams(5, 4, 24, torch.float32, "cpu"), fn, base, scale, NORM_EPS,
                                            HC_EPS, 20)
    assert torch.allclose(comb.sum(-2), torch.ones(5, 4), atol=1e-5)
    assert torch.allclose(comb.sum(-1), torch.ones(5, 4), atol=1e-3)


def _use_plan(monkeypatch, block_t: int, block_k: int, splits: int, block_d: int, tiles: int):
    """Every projection launch cuts K into `splits` slices of block_k-column steps, block_t tokens a program; every
    finish program walks `tiles` tiles of block_d columns (0: all of a token's)."""
    from dayzero.plugins.mhc import kernel, plan

    def project(tokens, k, sms):
        k_split = plan.cdiv(plan.cdiv(k, splits), block_k) * block_k
        return plan.ProjectPlan(block_t, block_k, plan.cdiv(k, k_split), k_split, 4, 2)

    monkeypatch.setattr(kernel, "project_plan", project)
    monkeypatch.setattr(kernel, "finish_plan", lambda tokens, dim: plan.RowPlan(
        block_d, tiles or plan.cdiv(dim, block_d), 4))


# (block_t, block_k, splits, block_d, tiles): the decode plan's slices and one tile a program, uneven slices (the
# last partly past K) and programs of two tiles (the last program's second past D), the prefill plan's 64-token
# blocks over all of K and one program a token
PLANS = {"decode-3-splits": (16, 16, 3, 16, 1), "decode-uneven": (16, 32, 2, 8, 2), "prefill-64": (64, 16, 1, 16, 0)}


@needs_triton
@pytest.mark.parametrize("tokens, hc, dim, dtype, fn_dtype", sizes(
    cpu=[(1, 4, 24, torch.bfloat16, torch.bfloat16), (3, 3, 40, torch.float32, torch.float32),
         (37, 2, 20, torch.bfloat16, torch.float32)],
    gpu=[(1, 4, 4096, torch.bfloat16, torch.bfloat16), (64, 4, 4096, torch.bfloat16, torch.float32),
         (8192, 4, 4096, torch.bfloat16, torch.bfloat16), (37, 3, 1000, torch.float32, torch.float32),
         (333, 2, 7168, torch.bfloat16, torch.float32)],
))
def test_pre_matches_reference(tokens, hc, dim, dtype, fn_dtype):
    _check_pre(tokens, hc, dim, dtype, fn_dtype)


@needs_triton
@pytest.mark.parametrize("tokens, hc, dim, dtype, fn_dtype", [(3, 3, 40, torch.float32, torch.float32),
                                                              (2, 4, 24, torch.bfloat16, torch.bfloat16)])
@pytest.mark.parametrize("plan", PLANS)
def test_every_plan_keeps_the_result(tokens, hc, dim, dtype, fn_dtype, plan, monkeypatch):
    _use_plan(monkeypatch, *PLANS[plan])
    _check_pre(tokens, hc, dim, dtype, fn_dtype)


def _check_pre(tokens, hc, dim, dtype, fn_dtype):
    """Both kernels of mhc_pre, their partials and outputs poisoned, against the reference."""
    from dayzero.plugins.mhc.kernel import mhc_finish_launcher, mhc_project_launcher

    streams = _streams(tokens, hc, dim, dtype)
    fn, base, scale = _weights(hc, dim, fn_dtype)
    mix_part, sq_part = mhc_project_launcher(streams, fn)
    got_parts = mhc_project_launcher(streams, fn, mix_part=torch.full_like(mix_part, float("nan")),
                                     sq_part=torch.full_like(sq_part, float("nan")))
    outputs = poisoned(tokens, dim, dtype=dtype), poisoned(tokens, hc), poisoned(tokens, hc, hc)
    got = mhc_finish_launcher(*got_parts, streams, base, scale, NORM_EPS, HC_EPS, 7, *outputs)
    assert all(g is o for g, o in zip(got, outputs))
    collapsed, post, comb = reference.mhc_pre(streams, fn, base, scale, NORM_EPS, HC_EPS, 7)
    assert rel_err(got[0], collapsed) < TOLERANCE[dtype]
    assert rel_err(got[1], post) < 1e-5 and rel_err(got[2], comb) < 1e-5


@needs_triton
@pytest.mark.parametrize("tokens, hc, dim, dtype", sizes(
    cpu=[(1, 4, 24, torch.bfloat16), (3, 3, 40, torch.float32), (37, 2, 20, torch.bfloat16),
         (5, 4, 600, torch.float32)],
    gpu=[(1, 4, 4096, torch.bfloat16), (64, 4, 4096, torch.bfloat16), (8192, 4, 4096, torch.bfloat16),
         (37, 3, 1000, torch.float32)],
))
def test_post_matches_reference(tokens, hc, dim, dtype):
    _check_post(tokens, hc, dim, dtype)


def _check_post(tokens, hc, dim, dtype):
    """The post kernel, its output poisoned, against the reference."""
    from dayzero.plugins.mhc.kernel import mhc_post_launcher

    residual = _streams(tokens, hc, dim, dtype)
    fn, base, scale = _weights(hc, dim)
    _, post, comb = reference.mhc_pre(residual, fn, base, scale, NORM_EPS, HC_EPS, 7)
    out = torch.randn(tokens, dim, device=DEVICE).to(dtype)
    streams = poisoned(tokens, hc, dim, dtype=dtype)
    assert mhc_post_launcher(out, residual, post, comb, streams) is streams
    assert rel_err(streams, reference.mhc_post(out, residual, post, comb)) < TOLERANCE[dtype]


@needs_triton
def test_prefill_plans_keep_the_result(monkeypatch):
    """The prefill plans (64-token projection blocks, one finish program a token, 2048-column post tiles) on 19
    tokens counted as prefill: more than 64 would cost the interpreter seconds of finish programs."""
    from dayzero.plugins.mhc import plan

    monkeypatch.setattr(plan, "DECODE_TOKENS", 8)
    assert not plan.is_decode(19)
    _check_pre(19, 3, 50, torch.float32, torch.float32)
    _check_post(19, 3, 50, torch.float32)


@needs_triton
def test_zero_tokens_launch_nothing():
    from dayzero.plugins.mhc.kernel import mhc_post_launcher, mhc_pre_launcher

    streams = torch.empty(0, 4, 24, device=DEVICE)
    fn, base, scale = _weights(4, 24)
    collapsed, post, comb = mhc_pre_launcher(streams, fn, base, scale, NORM_EPS, HC_EPS, 3)
    assert collapsed.shape == (0, 24) and post.shape == (0, 4) and comb.shape == (0, 4, 4)
    assert mhc_post_launcher(collapsed, streams, post, comb).shape == (0, 4, 24)


def _as_tuple(out) -> tuple:
    return out if isinstance(out, tuple) else (out,)


def _body_like_fake(op, args) -> tuple:
    """op's Triton body on args, checked to return the shapes, strides and dtypes of its fake."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    body = _as_tuple(op.dayzero_impls["cuda"](*args))
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fakes = _as_tuple(op.dayzero_impls["fake"](*(mode.from_tensor(a) if torch.is_tensor(a) else a for a in args)))
    for real, fake in zip(body, fakes, strict=True):
        assert (real.shape, real.stride(), real.dtype) == (fake.shape, fake.stride(), fake.dtype)
    return body


def _on_cpu(op, args) -> tuple:
    return _as_tuple(op(*(t.cpu() if torch.is_tensor(t) else t for t in args)))


def _close(got, expected) -> bool:
    return all(rel_err(g.cpu(), e) < TOLERANCE[torch.bfloat16] for g, e in zip(got, expected, strict=True))


@needs_triton
def test_ops_triton_bodies_match_their_fakes_and_the_cpu_reference():
    from dayzero.plugins import mhc

    streams = _streams(5, 3, 40, torch.bfloat16)
    fn, base, scale = _weights(3, 40, torch.bfloat16)
    pre_args = (streams, fn, base, scale, NORM_EPS, HC_EPS, 4)
    collapsed, post, comb = _body_like_fake(mhc.mhc_pre, pre_args)
    assert _close((collapsed, post, comb), _on_cpu(mhc.mhc_pre, pre_args))
    post_args = (collapsed, streams, post, comb)
    assert _close(_body_like_fake(mhc.mhc_post, post_args), _on_cpu(mhc.mhc_post, post_args))


@pytest.mark.parametrize("tokens", [pytest.param(t, marks=gpu_only, id=f"T{t}") for t in (1, 64)])
def test_decode_projection_spreads_fn_over_the_sms(tokens):
    import triton

    from dayzero.plugins import device as device_info
    from dayzero.plugins.mhc.kernel import project_plan

    sms = device_info.num_sms(torch.device("cuda"), cpu_default=2)
    plan = project_plan(tokens, 4 * 4096, sms)
    # every 128-column tile of fn is its own program where the SMs outnumber the tiles
    assert plan.splits * triton.cdiv(tokens, plan.block_t) >= min(sms, triton.cdiv(4 * 4096, plan.block_k))


class _TwoSublayers(torch.nn.Module):
    """Two sublayers' connections as the stream runs them (the sublayers themselves adds of their input): each collapse
    projects the streams, each add mixes them."""

    def __init__(self, hc: int, dim: int):
        super().__init__()
        self.first, self.second = (torch.nn.ParameterList(torch.nn.Parameter(w, requires_grad=False)
                                                          for w in _weights(hc, dim)) for _ in range(2))

    def forward(self, streams, out):
        from dayzero.plugins import mhc

        x, post, comb = mhc.mhc_pre(streams, *self.first, NORM_EPS, HC_EPS, 20)
        streams = mhc.mhc_post(out + x, streams, post, comb)
        y, post, comb = mhc.mhc_pre(streams, *self.second, NORM_EPS, HC_EPS, 20)
        return y, mhc.mhc_post(out + y, streams, post, comb)


@needs_triton
@pytest.mark.slow
@pytest.mark.parametrize("max_tokens", [64, 8192], ids=["decode", "prefill"])
def test_launch_plans_keep_an_exported_token_range(max_tokens):
    # the GPU bodies on the symbolic token count of an exported program: no guard, no narrowed range
    from tests.export.test_symbolic_launch_plans import _plan_every_plugin_call

    tokens = torch.export.Dim("T", min=1, max=max_tokens)
    streams, out = _streams(8, 4, 64, torch.float32, device="cpu"), torch.randn(8, 64)
    program = torch.export.export(_TwoSublayers(4, 64).cpu(), (streams, out),
                                  dynamic_shapes=({0: tokens}, {0: tokens}))
    guards, narrowed, launches, offset_tables, scratch_views = _plan_every_plugin_call(program)
    assert guards == {} and narrowed == [] and offset_tables == [] and scratch_views == []
    assert [name for name, _, _ in launches] == ["_mhc_project_kernel", "_mhc_finish_kernel", "_mhc_post_kernel"] * 2


def _sublayer_chain(tokens: int) -> torch.Tensor:
    """Four sublayers (the sublayer itself the identity) captured in one graph as the stream runs them: each projection
    reads the streams the post before it wrote, each finish the projection's partials, each post the finish's output."""
    from dayzero.plugins.mhc.kernel import mhc_post_launcher, mhc_pre_launcher

    torch.manual_seed(2)
    weights = [_weights(4, 4096, torch.bfloat16) for _ in range(4)]
    start = _streams(tokens, 4, 4096, torch.bfloat16)
    streams = [start.clone()]

    def step():
        del streams[1:]
        for fn, base, scale in weights:
            x, post, comb = mhc_pre_launcher(streams[-1], fn, base, scale, NORM_EPS, HC_EPS, 20)
            streams.append(mhc_post_launcher(x, streams[-1], post, comb))

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph.replay()
    torch.cuda.synchronize()
    return torch.stack(streams)


@pytest.mark.parametrize("tokens", [pytest.param(t, marks=gpu_only, id=f"T{t}") for t in (1, 64)])
def test_sublayer_chain_with_pdl_matches_plain_launches(tokens, monkeypatch):
    from dayzero.plugins import dependent_launch

    monkeypatch.setattr(dependent_launch, "pdl_mode", lambda like, latency_bound: dependent_launch.EARLY)
    with_pdl = _sublayer_chain(tokens)
    monkeypatch.setattr(dependent_launch, "pdl_mode", lambda like, latency_bound: dependent_launch.OFF)
    assert torch.equal(with_pdl, _sublayer_chain(tokens))


@pytest.mark.skipif(ON_GPU, reason="the ONNX export runs on the CPU machine")
def test_onnx_translations_emit_dayzero_nodes():
    pytest.importorskip("onnxscript")
    from dayzero.plugins.registry import ONNX_TRANSLATIONS

    streams = _streams(3, 4, 24, torch.float32, device="cpu")
    program = torch.onnx.export(_TwoSublayers(4, 24).cpu().eval(), (streams, torch.randn(3, 24)), dynamo=True,
                                verbose=False, optimize=False, custom_translation_table=ONNX_TRANSLATIONS)
    nodes = {node.op_type: node for node in program.model.graph if node.domain == "dayzero"}
    assert set(nodes) == {"MhcPre", "MhcPost"}
    assert len(nodes["MhcPre"].inputs) == 4 and len(nodes["MhcPre"].outputs) == 3
    assert nodes["MhcPre"].attributes["sinkhorn_iters"].value == 20
    assert len(nodes["MhcPost"].inputs) == 4 and len(nodes["MhcPost"].outputs) == 1


@pytest.mark.skipif(ON_GPU, reason="ONNX Runtime serves the CPU")
def test_onnx_runtime_kernels_are_the_reference():
    pytest.importorskip("onnxruntime_extensions")
    from dayzero.export import onnx_ort

    streams, out = _streams(5, 3, 20, torch.float32, device="cpu"), torch.randn(5, 20)
    fn, base, scale = _weights(3, 20, device="cpu")
    pre = onnx_ort.KERNELS["MhcPre"](streams, fn, base, scale, norm_eps=NORM_EPS, hc_eps=HC_EPS, sinkhorn_iters=7)
    expected = reference.mhc_pre(streams, fn, base, scale, NORM_EPS, HC_EPS, 7)
    assert all(torch.equal(got, want) for got, want in zip(pre, expected, strict=True))
    (mixed,) = onnx_ort.KERNELS["MhcPost"](out, streams, *expected[1:])
    assert torch.equal(mixed, reference.mhc_post(out, streams, *expected[1:]))
