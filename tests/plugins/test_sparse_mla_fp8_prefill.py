"""Sparse prefill over an FP8 latent cache through a BF16 copy of the pages it reads (fp8_prefill.py): the copy
holds the rows the FP8 kernel would decode, the BF16 kernel over it matches the reference on the FP8 cache, and the
copy is taken only where it pays (prefill-shaped eager CUDA calls, few pages against many row reads)."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.paged_cache.formats import unpack_fp8_latent
from dayzero.plugins.paged_cache.reference import PAGE_SIZE
from dayzero.plugins.sparse_mla import fp8_prefill
from tests.plugins.test_sparse_mla_kernel import (
    BF16,
    assert_matches,
    on_device,
    random_indices,
    scenario,
    sparse_reference,
)
from tests.plugins.triton_env import ON_GPU, gpu_only, needs_triton, poisoned, sizes

# (context per sequence, new tokens per sequence, H, topk)
GPU_CASES = [((9000, 2048, 300), (4096, 2048, 300), 128, 2048), ((33000,), (2048,), 64, 2048)]
CASES = sizes(
    cpu=[((200, 70, 9), (40, 70, 9), 16, 64), ((129,), (33,), 8, 128)],
    gpu=GPU_CASES,
)


def _run_on_workspace(sc, indices, v_dim: int = 512):
    from dayzero.plugins.sparse_mla.kernel import sparse_mla_launcher

    q, cache, table, cu, idx = on_device(sc.q, sc.cache, sc.block_table, sc.cu_seqlens, indices)
    workspace = fp8_prefill.bf16_workspace(cache, table, cu, idx, q.shape[-1] - v_dim)
    assert workspace is not None
    rows, bf16_table = workspace
    T, H = q.shape[:2]
    out = (poisoned(T, H, v_dim, dtype=q.dtype), poisoned(T, H))
    return sparse_mla_launcher(q, rows, bf16_table, cu, idx, sm_scale=0.7 / v_dim ** 0.5, v_dim=v_dim, out=out)


@needs_triton
@pytest.mark.parametrize("context, new, H, topk", CASES)
def test_bf16_kernel_over_the_copy_matches_the_fp8_reference(context, new, H, topk):
    sc = scenario(list(context), list(new), H, 512, 64, "fp8", BF16)
    indices = random_indices(sc, topk, blank_tokens=(0,))
    assert_matches(_run_on_workspace(sc, indices), sparse_reference(sc, indices, 512), BF16)


def test_the_copy_holds_the_decoded_rows_of_the_pages_the_indices_reach():
    sc = scenario([200, 130], [50, 3], 4, 128, 64, "fp8", BF16)
    indices = torch.full((53, 16), -1, dtype=torch.int32)
    indices[:50, 0] = torch.arange(50) + 100  # sequence 0 reaches position 149: pages 0-2 of its 4
    indices[50:, :2] = torch.tensor([[0, 5]] * 3)  # sequence 1 reaches page 0 only
    assert fp8_prefill.pages_read(indices, sc.cu_seqlens) == [3, 1]
    rows, table = fp8_prefill.bf16_pages(sc.cache, sc.block_table, [3, 1], 64)
    assert rows.shape == (4, PAGE_SIZE, 192) and rows.dtype == torch.bfloat16
    assert table.tolist() == [[0, 1, 2], [3, 3, 3]]
    for n, count in enumerate([3, 1]):
        for page in range(count):
            records = sc.cache[sc.block_table[n, page]]
            expected = unpack_fp8_latent(records, 64).to(torch.bfloat16)
            assert torch.equal(rows[table[n, page]], expected)


def test_pages_read_ignores_blank_rows_and_empty_sequences():
    cu = torch.tensor([0, 2, 2, 3], dtype=torch.int32)
    indices = torch.tensor([[-1, -1], [64, 3], [-1, -1]], dtype=torch.int32)
    assert fp8_prefill.pages_read(indices, cu) == [2, 0, 0]


def test_no_copy_where_it_would_not_pay():
    sc = scenario([4000] * 4, [1] * 4, 4, 128, 64, "fp8", BF16)  # decode: 4 x 63 pages against 4 x 64 reads
    indices = random_indices(sc, 64)
    assert fp8_prefill.bf16_workspace(sc.cache, sc.block_table, sc.cu_seqlens, indices, 64) is None
    nothing = torch.full_like(indices, -1)
    assert fp8_prefill.bf16_workspace(sc.cache, sc.block_table, sc.cu_seqlens, nothing, 64) is None


def test_only_eager_cuda_prefill_over_fp8_takes_the_copy():
    sc = scenario([300], [200], 4, 128, 64, "fp8", BF16)
    assert not fp8_prefill.workspace_applies(sc.q, sc.cache, sc.cu_seqlens)  # a CPU tensor
    if ON_GPU:
        q, cache, cu = on_device(sc.q, sc.cache, sc.cu_seqlens)
        assert fp8_prefill.workspace_applies(q, cache, cu)
        assert not fp8_prefill.workspace_applies(q[:16], cache, cu)  # decode-sized
        assert not fp8_prefill.workspace_applies(q.float(), cache, cu)


@pytest.mark.parametrize("context, new, H, topk", GPU_CASES)
@gpu_only[0]
@gpu_only[1]
def test_the_registered_op_over_fp8_matches_the_reference(context, new, H, topk):
    """On CUDA the op takes the copy for these prefill shapes (checked), then the BF16 kernel."""
    from dayzero.plugins.sparse_mla import op

    sc = scenario(list(context), list(new), H, 512, 64, "fp8", BF16)
    indices = random_indices(sc, topk)
    q, cache, table, cu, idx = on_device(sc.q, sc.cache, sc.block_table, sc.cu_seqlens, indices)
    assert fp8_prefill.workspace_applies(q, cache, cu)
    assert fp8_prefill.bf16_workspace(cache, table, cu, idx, 64) is not None
    got = op.sparse_mla_paged(*on_device(sc.q, sc.cache, sc.block_table, sc.cu_seqlens, indices), 0.7 / 512 ** 0.5,
                              512)
    assert_matches(got, sparse_reference(sc, indices, 512), BF16)

