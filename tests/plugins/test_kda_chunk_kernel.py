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
    ref_o, ref_s = R.chunk_kda(*(x.float()[None] for x in (q, k, v, g, beta)), initial_state=S0,
                               output_final_state=True, use_qk_l2norm_in_kernel=l2, cu_seqlens=cu)
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
    """Per-channel decays of tens of nats per token overflow the factored form; the exact path must take over."""
    check((70,), 2, 16, 16, torch.float32, decay_scale=decay_scale, tol=1e-4 if not ON_GPU else 5e-3)


def test_k3_bounded_gate():
    check((130,), 2, 16, 16, torch.float32, lower_bound=-5.0)


def test_registered_op_on_cpu_is_the_reference():
    from dayzero.plugins.kda import chunk_kda

    (q, k, v), g, beta, cu = inputs((20, 9), 2, 8, 8, torch.float32)
    o, s = chunk_kda(q[None], k[None], v[None], g[None], beta[None], output_final_state=True,
                     use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    ro, rs = R.chunk_kda(q[None], k[None], v[None], g[None], beta[None], output_final_state=True,
                         use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    assert torch.equal(o, ro) and torch.equal(s, rs)


def test_blockwise_solve_inverts_unit_lower():
    """solve_kernel's X times (I + L) is the identity for every chunk, including a partial last chunk."""
    from dayzero.plugins.kda.chunk_common import chunk_offsets
    from dayzero.plugins.kda.solve_kernel import solve_kernel

    lengths, H = (64, 40), 2
    T = sum(lengths)
    cu = torch.tensor([0, *lengths]).cumsum(0).int().to(DEVICE)
    L = torch.randn(T, H, 64) * 0.3
    for start, length in ((0, 64), (64, 40)):
        L[start:start + length] = L[start:start + length].permute(1, 0, 2).tril(-1).permute(1, 0, 2)
    L = L.to(DEVICE)
    X = poisoned(T, H, 64)
    solve_kernel[(2, H)](L, X, cu, chunk_offsets(cu), len(lengths), H=H)
    for start, length in ((0, 64), (64, 40)):
        for h in range(H):
            block = L[start:start + length, h, :length].cpu()
            inverse = X[start:start + length, h, :length].cpu().tril()
            eye = torch.eye(length)
            assert rel_err(inverse @ (eye + block), eye) < (1e-5 if not ON_GPU else 1e-4)
