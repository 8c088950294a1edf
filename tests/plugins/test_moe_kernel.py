"""The Triton MoE kernels (router GEMM, router, permutation, grouped expert GEMM, un-permutation, activation) vs the
reference (interpreter on CPU, native on the GPU)."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.moe import reference
from dayzero.plugins.moe.activation import activation_args, gated_activation
from tests.helpers import rel_err
from tests.plugins.triton_env import DEVICE, ON_GPU, gpu_only, needs_triton, poisoned, sizes

# on the GPU every test here runs natively (`pytest -m gpu`); on the CPU under the interpreter
pytestmark = [needs_triton] + ([pytest.mark.gpu] if ON_GPU else [])

# the CPU interpreter truncates fp32 -> bf16 where the GPU rounds to nearest, hence the loose bf16 bound
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 3e-2}
SITU = {"beta": 4.0, "linear_beta": 25.0}
PARAMS = {"silu": {}, "situ": SITU, "clamped_silu": {"limit": 0.9}}


def _routed_ids(tokens, experts, top_k, dead_expert=True):
    """Routing with the last expert never chosen (it gets zero rows)."""
    logits = torch.randn(tokens, experts, device=DEVICE)
    if dead_expert and top_k < experts:
        logits[:, -1] = -50
    return reference.route(logits, None, top_k)


def _expert_weights(experts, dim, inter, dtype):
    w1 = torch.randn(experts, inter, dim, device=DEVICE) / dim ** 0.5
    w3 = torch.randn(experts, inter, dim, device=DEVICE) / dim ** 0.5
    w2 = torch.randn(experts, dim, inter, device=DEVICE) / inter ** 0.5
    return w1.to(dtype), w3.to(dtype), w2.to(dtype)


@pytest.mark.parametrize("tokens, experts, dim, weight_dtype", sizes(
    cpu=[(5, 6, 40, torch.float32), (17, 33, 20, torch.float32), (1, 3, 7, torch.bfloat16),
         (18, 17, 48, torch.bfloat16)],
    gpu=[(8192, 256, 2304, torch.float32), (100, 896, 7168, torch.float32), (3, 7, 33, torch.float32),
         (333, 256, 2304, torch.bfloat16)],
))
def test_router_logits_match_the_fp32_gemm(tokens, experts, dim, weight_dtype):
    from dayzero.plugins.moe.router_gemm_kernel import router_logits_launcher

    x = torch.randn(tokens, dim, device=DEVICE).bfloat16()
    # weights over several binades, so all three bf16 pieces of the fp32 split carry bits
    weight = (torch.randn(experts, dim, device=DEVICE) * torch.logspace(-3, 1, dim, device=DEVICE)).to(weight_dtype)
    got = router_logits_launcher(x, weight, out=poisoned(tokens, experts))
    # products are exact, only the summation differs: its order under the interpreter; on the GPU also the tensor
    # cores' fp32 accumulation, which is not round-to-nearest (2.4e-5 seen at D 7168 on the H200)
    assert rel_err(got, reference.router_logits(x, weight)) < (1e-4 if ON_GPU else 1e-6)


@pytest.mark.parametrize("tokens, experts, top_k, num_groups, topk_group, activation, with_bias, renormalize", sizes(
    cpu=[(5, 8, 2, 1, 1, "sigmoid", True, True), (7, 12, 3, 4, 2, "sigmoid", True, False),
         (3, 16, 16, 1, 1, "softmax", False, True), (4, 24, 5, 8, 3, "softmax", True, True),
         (2, 7, 1, 1, 1, "sigmoid", False, False), (3, 20, 4, 5, 5, "sigmoid", True, True)],
    gpu=[(8192, 896, 16, 1, 1, "sigmoid", True, True), (64, 256, 8, 1, 1, "sigmoid", True, True),
         (333, 256, 8, 8, 4, "sigmoid", True, True), (100, 160, 6, 1, 1, "softmax", False, True),
         (1, 64, 64, 1, 1, "sigmoid", True, False)],
))
def test_route_matches_reference(tokens, experts, top_k, num_groups, topk_group, activation, with_bias,
                                 renormalize):
    from dayzero.plugins.moe.route_kernel import route_launcher

    logits = torch.randn(tokens, experts, device=DEVICE) * 2
    bias = torch.randn(experts, device=DEVICE) * 0.5 if with_bias else None
    args = (top_k, num_groups, topk_group, renormalize, 2.5, activation)
    out = poisoned(tokens, top_k), poisoned(tokens, top_k, dtype=torch.int64)
    weights, ids = route_launcher(logits, bias, *args, out=out)
    _, expected_ids = reference.route(logits, bias, *args)
    # near-ties may order differently by an ulp on the GPU: compare the chosen biased scores as sets, and the
    # weights against the rule applied to the kernel's own choice
    scores = torch.sigmoid(logits) if activation == "sigmoid" else logits.softmax(-1)
    biased = scores if bias is None else scores + bias
    assert (ids == expected_ids).float().mean() > 0.99
    assert torch.allclose(biased.gather(1, ids).sort(-1).values, biased.gather(1, expected_ids).sort(-1).values,
                          atol=1e-6)
    chosen = scores.gather(1, ids)
    chosen = chosen / (chosen.sum(-1, keepdim=True) + 1e-20) if renormalize else chosen
    assert rel_err(weights, chosen * 2.5) < 1e-5


def _permute_with(monkeypatch, config: dict) -> None:
    """The permutation's launch plan with `config` over its own entries."""
    from dayzero.plugins.moe import permute_kernel

    plan = permute_kernel._permute_config
    monkeypatch.setattr(permute_kernel, "_permute_config", lambda *args: {**plan(*args), **config})


def _launched(names: list):
    """A `launch=` wrapper that records each kernel's name."""
    def record(kernel):
        names.append(kernel.fn.__name__)
        return kernel

    return record


def _check_permute(tokens, experts, top_k, dim, kernels):
    """The permutation of a routing with a dead expert, against the reference, launching exactly `kernels`."""
    from dayzero.plugins.moe.permute_kernel import permute_launcher

    x = torch.randn(tokens, dim, device=DEVICE)
    _, ids = _routed_ids(tokens, experts, top_k)
    names = []
    got = permute_launcher(x, ids, experts, out=poisoned(tokens * top_k, dim), launch=_launched(names))
    for name, a, b in zip(("x_sorted", "order", "positions", "offsets"), got, reference.permute(x, ids, experts)):
        assert torch.equal(a, b), name
    if top_k < experts:
        assert got[3][-1] == got[3][-2], "the dead expert must own no rows"
    assert names == kernels


BLOCK_KERNELS = ["_block_counts_kernel", "_block_starts_kernel", "_permute_rows_kernel"]


@pytest.mark.parametrize("tokens, experts, top_k, dim", sizes(
    cpu=[(9, 6, 3, 40), (1, 4, 2, 16), (5, 4, 4, 24), (6, 10, 1, 7)],
    gpu=[(8192, 896, 16, 3584), (64, 256, 8, 2304), (1, 896, 16, 3584), (333, 64, 64, 100)],
))
def test_permute_matches_reference(tokens, experts, top_k, dim, monkeypatch):
    """The block-count path, at every size (prefill's path)."""
    _permute_with(monkeypatch, {"BATCH_ASSIGNMENTS": 0})
    _check_permute(tokens, experts, top_k, dim, BLOCK_KERNELS)


@pytest.mark.parametrize("tokens, experts, top_k, dim", sizes(
    cpu=[(1, 37, 3, 19), (3, 37, 8, 21), (17, 37, 3, 9), (64, 37, 8, 5), (2, 5, 5, 33), (1, 1, 1, 3)],
    gpu=[(1, 256, 8, 2304), (3, 37, 8, 2305), (17, 256, 8, 2304), (64, 256, 8, 2304), (64, 37, 3, 999),
         (32, 896, 16, 7168), (1, 1, 1, 3)],
))
def test_batch_permute_is_one_launch_that_matches_reference(tokens, experts, top_k, dim):
    """Decode batches (up to 512 assignments): one program per block of tokens ranks it against the whole batch."""
    _check_permute(tokens, experts, top_k, dim, ["_permute_batch_kernel"])


def test_permute_takes_the_block_count_path_above_512_assignments():
    """65 tokens of top-8 (64 are one batch launch above)."""
    _check_permute(65, 37, 8, 3, BLOCK_KERNELS)


@pytest.mark.parametrize("tokens, experts, top_k, config", [
    pytest.param(*s, id=f"{s[0]}-{s[1]}-{s[2]}-" + "-".join(f"{k}{v}" for k, v in s[3].items())) for s in [
        (13, 5, 3, {"BLOCK_T": 1, "CHUNK_A": 1}), (13, 5, 3, {"BLOCK_T": 4, "BLOCK_B": 1, "CHUNK_E": 2, "CHUNK_A": 16}),
        (9, 3, 3, {"BLOCK_T": 8, "BLOCK_D": 64, "CHUNK_A": 64}),
        (20, 7, 2, {"BLOCK_T": 16, "BLOCK_B": 4, "CHUNK_E": 8, "CHUNK_A": 8}),
        (11, 6, 5, {"BLOCK_T": 2, "CHUNK_E": 1, "CHUNK_A": 2})]])
@pytest.mark.parametrize("path", ["batch", "blocks"])
def test_permute_block_sizes(tokens, experts, top_k, config, path, monkeypatch):
    """The counting sort across block boundaries, block-start chunks and expert chunks of every size: one token per
    block, blocks longer than T, one expert per program; many tokens of a block on the same expert. The batch path
    across its chunks of assignments and experts as well."""
    _permute_with(monkeypatch, {**config, "BATCH_ASSIGNMENTS": 512 if path == "batch" else 0})
    # few experts with a skew, so that blocks hold runs of the same expert
    _check_permute(tokens, experts, top_k, 24, ["_permute_batch_kernel"] if path == "batch" else BLOCK_KERNELS)


def test_permute_of_no_tokens():
    from dayzero.plugins.moe.permute_kernel import permute_launcher

    x_sorted, order, positions, offsets = permute_launcher(torch.randn(0, 8, device=DEVICE),
                                                           torch.zeros(0, 2, dtype=torch.int64, device=DEVICE), 5)
    assert x_sorted.shape == (0, 8) and order.numel() == positions.numel() == 0
    assert torch.equal(offsets, torch.zeros(6, dtype=torch.int32, device=DEVICE))


@pytest.mark.parametrize("experts, experts_per_rank", [(8, 2), (12, 4), (6, 6), (6, 1)])
def test_permutation_groups_each_ranks_rows_contiguously(experts, experts_per_rank):
    from dayzero.plugins.moe import expert_rank_offsets
    from dayzero.plugins.moe.permute_kernel import permute_launcher

    tokens, top_k = 11, 3
    _, ids = _routed_ids(tokens, experts, top_k, dead_expert=False)
    _, order, _, offsets = permute_launcher(torch.randn(tokens, 8, device=DEVICE), ids, experts)
    bounds = expert_rank_offsets(offsets, experts_per_rank).tolist()
    rank_of_row = ids.reshape(-1)[order] // experts_per_rank
    for rank, (start, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        assert (rank_of_row[start:end] == rank).all()
        assert end - start == int((ids // experts_per_rank == rank).sum())
    assert bounds[0] == 0 and bounds[-1] == tokens * top_k


@pytest.mark.parametrize("tokens, top_k, dim, dtype", sizes(
    cpu=[(7, 3, 40, torch.float32), (4, 4, 33, torch.bfloat16), (1, 1, 8, torch.float32)],
    gpu=[(8192, 16, 3584, torch.bfloat16), (64, 8, 2304, torch.bfloat16), (77, 6, 1000, torch.float32)],
))
def test_unpermute_matches_reference_and_inverts_permute(tokens, top_k, dim, dtype):
    from dayzero.plugins.moe.permute_kernel import permute_launcher, unpermute_launcher

    experts = 2 * top_k
    weights, ids = _routed_ids(tokens, experts, top_k)
    x = torch.randn(tokens, dim, device=DEVICE).to(dtype)
    x_sorted, _, positions, _ = permute_launcher(x, ids, experts)
    y_sorted = torch.randn_like(x_sorted)
    out = poisoned(tokens, dim, dtype=dtype)
    assert rel_err(unpermute_launcher(y_sorted, weights, positions, out=out),
                   reference.unpermute(y_sorted, weights, positions)) < TOLERANCE[dtype]
    # renormalized weights sum to one per token, so the round trip returns x
    out = poisoned(tokens, dim, dtype=dtype)
    assert rel_err(unpermute_launcher(x_sorted, weights, positions, out=out), x) < TOLERANCE[dtype]


@pytest.mark.parametrize("tokens, top_k, dim, dtype", sizes(
    cpu=[(1, 8, 19, torch.bfloat16), (3, 3, 33, torch.float32), (17, 8, 7, torch.bfloat16), (64, 3, 5, torch.float32)],
    gpu=[(1, 8, 2304, torch.bfloat16), (17, 8, 2304, torch.bfloat16), (64, 8, 7168, torch.bfloat16),
         (3, 3, 999, torch.float32), (8192, 8, 2304, torch.bfloat16)],
))
def test_unpermute_adds_the_shared_output_in_its_sum(tokens, top_k, dim, dtype):
    from dayzero.plugins.moe.permute_kernel import unpermute_launcher

    experts = 2 * top_k + 1
    weights, ids = _routed_ids(tokens, experts, top_k)
    _, _, positions, _ = reference.permute(torch.randn(tokens, 1, device=DEVICE), ids, experts)
    y_sorted = torch.randn(tokens * top_k, dim, device=DEVICE).to(dtype)
    shared = torch.randn(tokens, dim, device=DEVICE).to(dtype)
    got = unpermute_launcher(y_sorted, weights, positions, shared, out=poisoned(tokens, dim, dtype=dtype))
    assert rel_err(got, reference.unpermute(y_sorted, weights, positions, shared)) < TOLERANCE[dtype]


@pytest.mark.parametrize("tokens, experts, top_k, dim, inter, dtype, activation", sizes(
    cpu=[(9, 6, 3, 40, 24, torch.float32, "silu"), (7, 5, 2, 24, 40, torch.float32, "situ"),
         (5, 4, 4, 32, 16, torch.bfloat16, "situ"), (3, 3, 1, 17, 9, torch.float32, "silu"),
         (6, 5, 2, 24, 20, torch.float32, "clamped_silu")],
    gpu=[(512, 64, 8, 2304, 1024, torch.bfloat16, "silu"), (256, 32, 16, 3584, 3072, torch.bfloat16, "situ"),
         (97, 16, 4, 200, 72, torch.float32, "situ"), (33, 8, 8, 256, 128, torch.bfloat16, "silu"),
         (300, 32, 8, 1024, 512, torch.bfloat16, "clamped_silu")],
))
def test_triton_grouped_mlp_matches_reference(tokens, experts, top_k, dim, inter, dtype, activation):
    from dayzero.plugins.moe.grouped_mlp_paths import grouped_mlp_triton

    _, ids = _routed_ids(tokens, experts, top_k)
    x_sorted, _, _, offsets = reference.permute(torch.randn(tokens, dim, device=DEVICE).to(dtype), ids, experts)
    w1, w3, w2 = _expert_weights(experts, dim, inter, dtype)
    params = PARAMS[activation]
    beta, linear_beta = activation_args(activation, params)
    out = poisoned(tokens * top_k, dim, dtype=dtype)
    got = grouped_mlp_triton(x_sorted, offsets, w1, w3, w2, activation, beta, linear_beta, out=out)
    expected = reference.grouped_mlp(x_sorted, offsets, w1, w3, w2, activation, **params)
    assert rel_err(got, expected) < TOLERANCE[dtype]


@pytest.mark.parametrize("tokens, experts, top_k, dim, inter, activation", [
    pytest.param(*s, marks=gpu_only) for s in [(512, 64, 8, 2304, 1024, "silu"), (200, 32, 16, 3584, 3072, "situ"),
                                               (8, 32, 8, 2304, 1024, "situ")]])
def test_grouped_mm_path_matches_reference(tokens, experts, top_k, dim, inter, activation):
    from dayzero.plugins.moe.grouped_mlp_paths import grouped_mlp_grouped_mm, grouped_mm_available

    x = torch.randn(tokens, dim, device="cuda").bfloat16()
    if not grouped_mm_available(x):
        pytest.skip("torch._grouped_mm is not available on this GPU")
    _, ids = _routed_ids(tokens, experts, top_k)
    x_sorted, _, _, offsets = reference.permute(x, ids, experts)
    w1, w3, w2 = _expert_weights(experts, dim, inter, torch.bfloat16)
    params = SITU if activation == "situ" else {}
    got = grouped_mlp_grouped_mm(x_sorted, offsets, w1, w3, w2, activation, params.get("beta", 1.0),
                                 params.get("linear_beta"))
    assert rel_err(got, reference.grouped_mlp(x_sorted, offsets, w1, w3, w2, activation, **params)) < 1e-2


@pytest.mark.parametrize("rows, cols, dtype, activation", sizes(
    cpu=[(5, 33, torch.float32, "silu"), (3, 70, torch.float32, "situ"), (4, 16, torch.bfloat16, "situ"),
         (3, 41, torch.float32, "clamped_silu"), (2, 24, torch.bfloat16, "clamped_silu")],
    gpu=[(131072, 3072, torch.bfloat16, "situ"), (512, 1024, torch.bfloat16, "silu"), (7, 999, torch.float32, "situ"),
         (4096, 2048, torch.bfloat16, "clamped_silu")],
))
def test_gated_activation_matches_reference(rows, cols, dtype, activation):
    from dayzero.plugins.moe.activation_kernel import gated_activation_launcher

    # gates around zero (the series branch of tanh) and far out; ups beyond the SiTU soft cap
    gate = (torch.randn(rows, cols, device=DEVICE) * torch.logspace(-3, 1, cols, device=DEVICE)).to(dtype)
    up = (torch.randn(rows, cols, device=DEVICE) * 40).to(dtype)
    params = PARAMS[activation]
    got = gated_activation_launcher(gate, up, activation, *activation_args(activation, params),
                                    out=poisoned(rows, cols, dtype=dtype))
    assert rel_err(got, gated_activation(gate, up, activation, **params)) < TOLERANCE[dtype]


@pytest.mark.parametrize("rows, cols", [(5, 33), (2, 3000), (3, 16)])
def test_gated_activation_reads_the_halves_of_a_fused_projection(rows, cols):
    """gate and up as the two halves of one [R, 2I] GEMM output (GatedMLP's gate_up_proj): read in place."""
    from dayzero.plugins.moe.activation_kernel import gated_activation_launcher

    fused = torch.randn(rows, 2 * cols + 6, device=DEVICE)[:, 3 : 3 + 2 * cols]
    gate, up = fused.chunk(2, dim=-1)
    assert not gate.is_contiguous()
    got = gated_activation_launcher(gate, up, "silu", out=poisoned(rows, cols, dtype=torch.float32))
    assert rel_err(got, gated_activation(gate, up, "silu")) < 1e-6


def test_registered_ops_dispatch_to_reference_on_cpu():
    from dayzero.plugins import moe

    x, (w1, w3, w2) = torch.randn(7, 12), [t.cpu() for t in _expert_weights(6, 12, 10, torch.float32)]
    logits, bias = torch.randn(7, 6), torch.randn(6)
    weights, ids = moe.route(logits, bias, 3, 2, 1)
    expected_weights, expected_ids = reference.route(logits, bias, 3, 2, 1)
    assert torch.equal(ids, expected_ids) and torch.equal(weights, expected_weights)
    x_bf16 = x.bfloat16()
    assert torch.equal(moe.router_logits(x_bf16, w1[0]), reference.router_logits(x_bf16, w1[0]))
    got = moe.moe_experts(x, weights, ids, w1, w3, w2, "situ", **SITU)
    assert rel_err(got, reference.moe_experts(x, weights, ids, w1, w3, w2, "situ", **SITU)) < 1e-6
    shared = torch.randn(7, 12)
    with_shared = moe.moe_experts(x, weights, ids, w1, w3, w2, "situ", shared, **SITU)
    assert rel_err(with_shared, got + shared) < 1e-6
    assert torch.equal(moe.gated_mlp(x, w1[0], w3[0], w2[0]), reference.gated_mlp(x, w1[0], w3[0], w2[0]))


def test_router_logits_export_to_onnx_as_a_plain_matmul():
    pytest.importorskip("onnxscript")
    from dayzero.plugins import moe
    from dayzero.plugins.registry import ONNX_TRANSLATIONS

    class Router(torch.nn.Module):
        def forward(self, x, weight):
            return moe.router_logits(x, weight)

    program = torch.onnx.export(Router().eval(), (torch.randn(5, 8).bfloat16(), torch.randn(4, 8)), dynamo=True,
                                custom_translation_table=ONNX_TRANSLATIONS)
    assert "MatMul" in [n.op_type for n in program.model_proto.graph.node]


def test_onnx_export_emits_dayzero_nodes():
    pytest.importorskip("onnxscript")
    from dayzero.plugins import moe
    from dayzero.plugins.registry import ONNX_DOMAIN, ONNX_TRANSLATIONS

    class Layer(torch.nn.Module):
        def forward(self, x, router, bias, w1, w3, w2):
            weights, ids = moe.route(x @ router.t(), bias, 2)
            return moe.moe_experts(x, weights, ids, w1, w3, w2, "situ", **SITU) + moe.gated_mlp(x, w1[0], w3[0], w2[0])

    args = (torch.randn(5, 8), torch.randn(4, 8), torch.randn(4), *(t.cpu() for t in _expert_weights(4, 8, 6,
                                                                                                      torch.float32)))
    program = torch.onnx.export(Layer().eval(), args, dynamo=True, custom_translation_table=ONNX_TRANSLATIONS)
    custom = [n.op_type for n in program.model_proto.graph.node if n.domain == ONNX_DOMAIN]
    assert custom == ["MoeRoute", "MoePermute", "MoeGroupedMlp", "MoeUnpermute", "MoeGatedActivation"]


@pytest.mark.parametrize("with_shared", [False, True], ids=["routed", "with-shared"])
def test_unpermute_is_one_onnx_node_that_onnx_runtime_runs(with_shared, tmp_path):
    """MoeUnpermute takes the shared output as an optional fourth input (flagged by has_shared); ONNX Runtime's
    kernel (the registered op's CPU reference) gives the op's result."""
    pytest.importorskip("onnxscript")
    pytest.importorskip("onnxruntime_extensions")
    from dayzero.export import onnx_ort
    from dayzero.plugins import moe
    from dayzero.plugins.registry import ONNX_DOMAIN, ONNX_TRANSLATIONS

    class Unpermute(torch.nn.Module):
        def forward(self, y_sorted, weights, positions, *shared):
            return moe.unpermute(y_sorted, weights, positions, *shared)

    weights, ids = reference.route(torch.randn(5, 7), None, 3)
    positions = reference.permute(torch.randn(5, 1), ids, 7)[2]
    args = (torch.randn(15, 9), weights, positions) + ((torch.randn(5, 9),) if with_shared else ())
    program = torch.onnx.export(Unpermute().eval(), args, dynamo=True, custom_translation_table=ONNX_TRANSLATIONS)
    custom = [(n.op_type, len(n.input)) for n in program.model_proto.graph.node if n.domain == ONNX_DOMAIN]
    assert custom == [("MoeUnpermute", len(args))]
    path = tmp_path / "unpermute.onnx"
    program.save(path)
    session = onnx_ort.session(path)
    (got,) = session.run(None, {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)})
    assert torch.equal(torch.from_numpy(got), reference.unpermute(*args))
