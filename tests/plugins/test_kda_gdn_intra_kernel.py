"""gdn_intra_kernel, the per-head-gate intra-chunk kernel of chunked gated DeltaNet, against its definitions in fp32:
Aqk and X = (I + Akk)^{-1} on and below the diagonal, the row factors and the chunk decays (interpreter on CPU, native
on GPU)."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.kda import reference as R
from tests.helpers import rel_err
from tests.plugins.test_kda_chunk_kernel import bounds_of
from tests.plugins.test_kda_scalar_gate import varlen_inputs
from tests.plugins.triton_env import DEVICE, ON_GPU, needs_triton, poisoned, sizes

pytestmark = needs_triton


def inverse_norms(x: torch.Tensor, l2: bool) -> torch.Tensor:
    return torch.rsqrt((x * x).sum(-1) + 1e-6) if l2 else torch.ones(x.shape[:-1])


def chunk_spans(lengths) -> list[tuple[int, int]]:
    """(first token, end) of every chunk of 64 tokens, sequence by sequence."""
    spans, start = [], 0
    for length in lengths:
        spans += [(c0, min(c0 + 64, start + length)) for c0 in range(start, start + length, 64)]
        start += length
    return spans


def intra_reference(q, k, g, beta, lengths, scale: float, l2: bool) -> dict:
    """The kernel's outputs from gdn_intra_kernel.py's definitions, per chunk in fp32: aqk and x [T, H, 64] (zero
    above the diagonal), w_scale, q_scale, k_scale [T, H], decay [chunks, H]."""
    H = g.shape[1]
    q, k = (R.grouped_heads(x.float()[None], H)[0] for x in (q, k))
    q_inv, k_inv = inverse_norms(q, l2), inverse_norms(k, l2)
    T = q.shape[0]
    out = {name: torch.zeros(T, H, 64) for name in ("aqk", "x")}
    out.update({name: torch.zeros(T, H) for name in ("w_scale", "q_scale", "k_scale")})
    spans = chunk_spans(lengths)
    out["decay"] = torch.zeros(len(spans), H)
    for c, (c0, c1) in enumerate(spans):
        n = c1 - c0
        G = g[c0:c1].cumsum(0)  # [n, H]
        causal = torch.ones(n, n).tril().bool()
        pair = (G[:, None] - G[None, :]).masked_fill(~causal[..., None], float("-inf")).exp()  # [r, j, H]
        qn, kn = q[c0:c1] * q_inv[c0:c1, :, None], k[c0:c1] * k_inv[c0:c1, :, None]
        qk = torch.einsum("rhd,jhd->rjh", qn, kn) * pair
        kk = torch.einsum("rhd,jhd->rjh", kn, kn) * pair * beta[c0:c1, None, :]
        eye = torch.eye(n)
        out["aqk"][c0:c1, :, :n] = scale * qk.permute(0, 2, 1)
        X = torch.linalg.solve_triangular(eye + kk.permute(2, 0, 1).tril(-1), eye, upper=False, unitriangular=True)
        out["x"][c0:c1, :, :n] = X.permute(1, 0, 2)
        out["w_scale"][c0:c1] = beta[c0:c1] * G.exp() * k_inv[c0:c1]
        out["q_scale"][c0:c1] = scale * q_inv[c0:c1] * G.exp()
        out["k_scale"][c0:c1] = k_inv[c0:c1] * (G[-1] - G).exp()
        out["decay"][c] = G[-1].exp()
    return out


@pytest.mark.parametrize("lengths, Hk, H, K, block_k, l2, decay_scale", sizes(
    cpu=[((70, 1, 37), 1, 2, 32, 16, True, 1.0), ((64, 5), 2, 2, 16, 64, False, 1.0),
         ((3, 130), 2, 4, 32, 32, True, 300.0)],
    gpu=[((8192,), 16, 32, 128, 64, True, 1.0), ((1000, 77, 1), 4, 12, 128, 64, True, 1.0),
         ((333, 5), 16, 16, 64, 32, False, 300.0)],
))
def test_intra_terms_match_definitions(lengths, Hk, H, K, block_k, l2, decay_scale):
    """Partial last chunks, a sequence of one token, K tiles crossed (block_k < K), grouped and ungrouped value heads;
    per-token decays of 300 nats underflow the pairwise terms, never overflow them."""
    from dayzero.plugins.kda.gdn_intra_kernel import gdn_intra_terms

    q, k, _, g, beta, cu = varlen_inputs(lengths, Hk, H, K, 16, torch.float32)
    g = g * decay_scale
    if not l2:
        # unit-norm-sized keys keep I + Akk well conditioned without the kernel's normalization
        q, k = q / K ** 0.5, k / K ** 0.5
    T, num_chunks = sum(lengths), sum(lengths) // 64 + len(lengths)
    got = {name: poisoned(T, H, 64) for name in ("aqk", "x")}
    got.update({name: poisoned(T, H) for name in ("w_scale", "q_scale", "k_scale")})
    got["decay"] = poisoned(num_chunks, H)
    gdn_intra_terms(q.to(DEVICE), k.to(DEVICE), g.to(DEVICE), beta.to(DEVICE), K ** -0.5, bounds_of(cu.to(DEVICE),
                    num_chunks), l2, got["x"], got["aqk"], got["w_scale"], got["q_scale"], got["k_scale"],
                    got["decay"], block_k=block_k)
    ref = intra_reference(q, k, g, beta, lengths, K ** -0.5, l2)
    rows = torch.cat([torch.arange(n) % 64 for n in lengths])  # each token's row in its chunk
    lower = torch.ones(64, 64).tril().bool()[rows][:, None, :].expand(T, H, 64)
    tol = 1e-4 if not ON_GPU else 5e-3
    for name in ("aqk", "x"):
        assert rel_err(torch.where(lower, got[name].cpu(), 0.0), ref[name]) < tol, name
    for name in ("w_scale", "q_scale", "k_scale"):
        assert rel_err(got[name].cpu(), ref[name]) < tol, name
    assert rel_err(got["decay"][:len(chunk_spans(lengths))].cpu(), ref["decay"]) < tol
