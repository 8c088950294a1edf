"""The Triton chunked KDA prefill vs the reference: outputs and final states (interpreter on CPU, native on GPU)."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.kda import reference as R
from tests.helpers import rel_err
from tests.plugins.triton_env import DEVICE, ON_GPU, needs_triton, poisoned, sizes

pytestmark = needs_triton


def inputs(lengths, H, K, V, dtype, decay_scale=1.0, lower_bound=None):
    T = sum(lengths)
    q, k = torch.randn(T, H, K), torch.randn(T, H, K)
    v = torch.randn(T, H, V)
    z = torch.randn(T, H, K)
    g = lower_bound * torch.sigmoid(z) if lower_bound else -torch.nn.functional.softplus(z) * decay_scale
    beta = torch.rand(T, H)
    cu = torch.tensor([0, *lengths]).cumsum(0).int()
    cast = [x.to(dtype) for x in (q, k, v)]
    return cast, g, beta.to(dtype), cu


def check(lengths, H, K, V, dtype, with_state=True, l2=True, tol=None, **gate):
    from dayzero.plugins.kda.chunk_kernel import chunk_kda_launcher

    (q, k, v), g, beta, cu = inputs(lengths, H, K, V, dtype, **gate)
    S0 = torch.randn(len(lengths), H, K, V) if with_state else None
    # the reference runs on the device too: on a GPU host's CPU the realistic sizes take minutes
    ref_o, ref_s = R.chunk_kda(*(x.float()[None].to(DEVICE) for x in (q, k, v, g, beta)),
                               initial_state=None if S0 is None else S0.to(DEVICE), output_final_state=True,
                               use_qk_l2norm_in_kernel=l2, cu_seqlens=cu.to(DEVICE))
    ref_o, ref_s = ref_o.cpu(), ref_s.cpu()
    dev = [x.to(DEVICE) for x in (q, k, v, g, beta)]
    out = poisoned(sum(lengths), H, V, dtype=dtype)
    final = poisoned(len(lengths), H, K, V)
    o, s = chunk_kda_launcher(*dev, K ** -0.5, None if S0 is None else S0.to(DEVICE), cu.to(DEVICE), l2, True,
                              out=out, final_out=final)
    if tol is None:
        tol = 2e-2 if dtype == torch.bfloat16 else (5e-3 if ON_GPU else 1e-5)
    assert rel_err(o.float().cpu(), ref_o[0]) < tol
    assert rel_err(s.cpu(), ref_s) < tol


@pytest.mark.parametrize("lengths, H, K, V", sizes(
    cpu=[((70,), 2, 16, 16), ((5, 64, 1), 1, 32, 16), ((129,), 1, 16, 32)],
    gpu=[((8192,), 32, 128, 128), ((1000, 77, 4096, 1), 8, 128, 128), ((333,), 96, 128, 128)],
))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_matches_reference(lengths, H, K, V, dtype):
    check(lengths, H, K, V, dtype)


def test_zero_initial_state_and_no_l2norm():
    check((37, 3) if not ON_GPU else (3000, 3), 2, 16 if not ON_GPU else 128, 16 if not ON_GPU else 128,
          torch.float32, with_state=False, l2=False)


@pytest.mark.parametrize("decay_scale", [30.0, 300.0])
def test_strong_decay_uses_exact_diagonal(decay_scale):
    """Per-channel decays of tens of nats per token overflow a factored form; exact terms must take over."""
    check((70,), 2, 16, 16, torch.float32, decay_scale=decay_scale, tol=1e-4 if not ON_GPU else 5e-3)


def test_k3_bounded_gate():
    check((130,), 2, 16, 16, torch.float32, lower_bound=-5.0)


def test_unwritten_intermediates_never_reach_the_output(monkeypatch):
    # the pair and solve kernels leave the blocks above the diagonal of Aqk and X unwritten, and their readers load
    # the rows whole: every intermediate buffer starts as NaN here, so anything read and not selected away shows
    real_empty = torch.empty

    def nan_empty(*shape, **kwargs):
        out = real_empty(*shape, **kwargs)
        return out.fill_(float("nan")) if out.is_floating_point() else out

    monkeypatch.setattr(torch, "empty", nan_empty)
    check((70, 5) if not ON_GPU else (4100, 77), 2 if not ON_GPU else 8, 16 if not ON_GPU else 128,
          16 if not ON_GPU else 128, torch.float32)


def test_registered_op_on_cpu_is_the_reference():
    from dayzero.plugins.kda import chunk_kda

    (q, k, v), g, beta, cu = inputs((20, 9), 2, 8, 8, torch.float32)
    o, s = chunk_kda(q[None], k[None], v[None], g[None], beta[None], output_final_state=True,
                     use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    ro, rs = R.chunk_kda(q[None], k[None], v[None], g[None], beta[None], output_final_state=True,
                         use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    assert torch.equal(o, ro) and torch.equal(s, rs)


def bounds_of(cu, num_chunks):
    from dayzero.plugins.kda.chunk_common import chunk_tables

    return chunk_tables(cu, num_chunks)[1]


@pytest.mark.parametrize("lengths", [(1,), (64,), (130,), (0, 70, 0, 0, 64, 1, 0), (5, 0), tuple(range(0, 400, 23)),
                                     tuple(range(150)), (0,) * 65 + (3,)])
def test_chunk_tables(lengths):
    """Every sequence's first chunk, and every global chunk's (first token, sequence end): sequences of no tokens
    included, more sequences than one block of the kernel's sequence loop (64), and the grid's spare chunks (the
    launch bound T // 64 + N) dead: first token >= end."""
    from dayzero.plugins.kda.chunk_common import chunk_tables

    cu = torch.tensor([0, *lengths]).cumsum(0).int()
    num_chunks = sum(lengths) // 64 + len(lengths)
    expected = [(s + c, s + n) for s, n in zip(cu.tolist(), lengths) for c in range(0, n, 64)]
    counts = [-(-n // 64) for n in lengths]
    offsets, bounds = (x.cpu() for x in chunk_tables(cu.to(DEVICE), num_chunks))
    assert offsets.tolist() == [sum(counts[:i]) for i in range(len(lengths))]
    assert bounds[:len(expected)].tolist() == [list(e) for e in expected]
    assert (bounds[len(expected):, 0] >= bounds[len(expected):, 1]).all()


def test_blockwise_solve_inverts_unit_lower():
    """solve_kernel's X times (I + L) is the identity for every chunk, including a partial last chunk."""
    from dayzero.plugins.kda.solve_kernel import solve_kernel

    lengths, H = (64, 40), 2
    T = sum(lengths)
    cu = torch.tensor([0, *lengths]).cumsum(0).int().to(DEVICE)
    L = torch.randn(T, H, 64) * 0.3
    for start, length in ((0, 64), (64, 40)):
        L[start:start + length] = L[start:start + length].permute(1, 0, 2).tril(-1).permute(1, 0, 2)
    L = L.to(DEVICE)
    X = poisoned(T, H, 64)
    solve_kernel[(2, H)](L, X, bounds_of(cu, 2), H=H)
    for start, length in ((0, 64), (64, 40)):
        for h in range(H):
            block = L[start:start + length, h, :length].cpu()
            inverse = X[start:start + length, h, :length].cpu().tril()
            eye = torch.eye(length)
            assert rel_err(inverse @ (eye + block), eye) < (1e-5 if not ON_GPU else 1e-4)


def pair_terms_reference(q, k, g, beta, lengths, scale):
    """Aqk (lower) and X = (I + Akk)^{-1} per chunk in fp32 from the docs/models.md definitions, as [T, H, 64]."""
    q, k = (torch.nn.functional.normalize(x.float(), dim=-1, eps=1e-3) for x in (q, k))
    aqk, x = torch.zeros(*q.shape[:2], 64), torch.zeros(*q.shape[:2], 64)
    start = 0
    for length in lengths:
        for c0 in range(start, start + length, 64):
            c1 = min(c0 + 64, start + length)
            G = g[c0:c1].cumsum(0).transpose(0, 1)  # [H, C, K]
            qc, kc = q[c0:c1].transpose(0, 1), k[c0:c1].transpose(0, 1)
            decay = (G[:, :, None] - G[:, None, :]).clamp(max=0).exp()  # [H, r, j, K]
            qk = torch.einsum("hrd,hjd,hrjd->hrj", qc, kc, decay)
            kk = torch.einsum("hrd,hjd,hrjd->hrj", kc, kc, decay) * beta[c0:c1].T[:, :, None]
            eye = torch.eye(c1 - c0)
            aqk[c0:c1, :, :c1 - c0] = (scale * qk).tril().transpose(0, 1)
            x[c0:c1, :, :c1 - c0] = torch.linalg.inv(eye + kk.tril(-1)).transpose(0, 1)
        start += length
    return aqk, x


@pytest.mark.parametrize("decay_scale", [1.0, 5.0, 300.0], ids=["mild", "mixed", "strong"])
def test_pair_kernel_scores_and_inverse(decay_scale):
    """The pair terms alone: Aqk and X on and below the diagonal, a partial last chunk, two sequences;
    'mixed' decays let some column blocks take the factored path and others the exact one, 'strong' ones would
    underflow factored terms (e^-300 per token)."""
    from dayzero.plugins.kda.chunk_intra_kernel import pair_terms

    lengths, H, K = (70, 37), 2, 32
    (q, k, _), g, beta, cu = inputs(lengths, H, K, 16, torch.float32, decay_scale=decay_scale)
    T = sum(lengths)
    g_cum = torch.cat([g[s:s + 64].cumsum(0) for s0, n in zip((0, 70), lengths) for s in range(s0, s0 + n, 64)
                       ]).to(DEVICE)
    cu = cu.to(DEVICE)
    aqk, x = poisoned(T, H, 64), poisoned(T, H, 64)
    q_inv, k_inv = poisoned(T, H), poisoned(T, H)
    pair_terms(q.to(DEVICE), k.to(DEVICE), g_cum, beta.to(DEVICE), K ** -0.5, bounds_of(cu, 4), True, x, aqk, q_inv,
               k_inv, block_k=16)
    ref_aqk, ref_x = pair_terms_reference(q, k, g, beta, lengths, K ** -0.5)
    lower = torch.ones(64, 64).tril().bool()
    rows = torch.cat([torch.arange(n) % 64 for n in lengths])  # each token's row in its chunk
    mask = lower[rows][:, None, :].expand(T, H, 64)
    for got, ref in ((aqk, ref_aqk), (x, ref_x)):
        got = torch.where(mask, got.cpu(), 0.0)
        assert rel_err(got, torch.where(mask, ref, 0.0)) < (1e-4 if not ON_GPU else 5e-3)
    assert rel_err(q_inv.cpu(), 1 / q.norm(dim=-1).clamp_min(1e-3)) < 1e-4
    assert rel_err(k_inv.cpu(), 1 / k.norm(dim=-1).clamp_min(1e-3)) < 1e-4
