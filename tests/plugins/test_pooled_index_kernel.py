"""Pooled index keys (GLM-5.3's index_kpool): the reference's pool rule against a direct formula and its cache and
window rules (a chunked prefill, and decode steps with rejected drafts that completed a pool, leave what one
prefill leaves); the Triton writes (prefill, decode) and the Top-K kernels over pooled pages against the reference,
plain and MXFP8, with odd pool sizes, chunks that start inside pools, windows from history, padding rows and
tokens."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.indexer import pooled_reference as reference
from dayzero.plugins.paged_cache.formats import index_cache_shape, load_index_rows, pooled_row, pooled_rows_per_page
from dayzero.plugins.paged_cache.reference import PAGE_SIZE, physical_rows
from tests.helpers import rel_err
from tests.plugins.test_indexer_kernel import CPU_DECODE, CPU_PREFILL
from tests.plugins.test_indexer_sparse_mla_reference import paged_layout
from tests.plugins.triton_env import DEVICE, ON_GPU, needs_triton, sizes


def random_cache(num_pages: int, dim: int, kpool: int, quantized: bool, gen) -> torch.Tensor:
    """A pooled cache full of random values (bytes for MXFP8), never zeros: unwritten rows must keep them."""
    shape = index_cache_shape(num_pages, dim, quantized, kpool)
    if quantized:
        return torch.randint(0, 256, shape, dtype=torch.uint8, generator=gen)
    return torch.randn(shape, generator=gen)


class Layout:
    """Sequences of `lengths` tokens in shuffled pages; `window` holds one slot a sequence (slot n + 1) and spares."""

    def __init__(self, lengths, dim, kpool, quantized=False, dtype=torch.float32, seed=0):
        gen = torch.Generator().manual_seed(seed)
        self.lengths, self.dim, self.kpool = list(lengths), dim, kpool
        num_pages = sum(-(-n // PAGE_SIZE) for n in lengths) + 3
        self.table, _ = paged_layout(self.lengths, num_pages, seed)
        self.rows = [torch.randn(n, 2 * dim, generator=gen).to(dtype) for n in lengths]
        self.ape = torch.randn(kpool, dim, generator=gen)
        self.cache = random_cache(num_pages, dim, kpool, quantized, gen)
        self.window = torch.randn(len(lengths) + 4, kpool - 1, 2 * dim, generator=gen).to(dtype)

    def slots(self, n: int, positions: torch.Tensor) -> torch.Tensor:
        return physical_rows(self.table[n], positions)

    def chunk(self, spans):
        """Prefill arguments (rows, slot_mapping, positions, cu_seqlens, window slots) of positions [a, b) of each
        sequence n, (n, a, b) in spans."""
        rows = torch.cat([self.rows[n][a:b] for n, a, b in spans])
        positions = torch.cat([torch.arange(a, b) for _, a, b in spans])
        slot_mapping = torch.cat([self.slots(n, torch.arange(a, b)) for n, a, b in spans])
        cu = torch.tensor([0, *[b - a for _, a, b in spans]]).cumsum(0).to(torch.int32)
        slots = torch.tensor([n + 1 for n, _, _ in spans], dtype=torch.int32)
        return rows, slot_mapping, positions, cu, slots

    def pool_keys(self, n: int) -> torch.Tensor:
        """The keys of sequence n's complete pools, read back from the cache (fp32)."""
        ends = torch.arange(self.lengths[n] // self.kpool) * self.kpool + self.kpool - 1
        pages = self.table[n].long()[ends // PAGE_SIZE]
        return load_index_rows(self.cache, pooled_row(pages, ends, self.kpool), self.dim,
                               pooled_rows_per_page(self.kpool))


def prefill(layout: Layout, spans) -> None:
    """The reference prefill write of positions [a, b) of each sequence n, (n, a, b) in spans."""
    rows, *rest = layout.chunk(spans)
    reference.write_pooled_index_keys_prefill(layout.cache, layout.window, rows, layout.ape, *rest)


def test_a_pool_key_is_the_softmax_weighted_mean_per_channel():
    rows, ape = torch.randn(5, 3, 8), torch.randn(3, 4)
    keys, gates = rows[..., :4], rows[..., 4:]
    weights = torch.exp(gates + ape) / torch.exp(gates + ape).sum(dim=1, keepdim=True)
    assert rel_err(reference.pool_keys(rows, ape), (weights * keys).sum(dim=1)) < 1e-6


@pytest.mark.parametrize("kpool", [3, 5])
def test_chunked_prefill_and_decode_with_rejected_drafts_leave_what_one_prefill_leaves(kpool):
    """Sequence 0 in one prefill; sequence 1 (the same rows) in chunks ending inside pools, then decode steps of 3
    tokens whose last one or two are rejected (wrong rows, which may complete a pool), then the right ones."""
    whole = Layout([70, 70], 8, kpool)
    whole.rows[1] = whole.rows[0].clone()
    prefill(whole, [(0, 0, 70)])
    prefill(whole, [(1, 0, 7)])
    prefill(whole, [(1, 7, 31)])
    position = 31
    while position < 70:
        drafted = whole.rows[1][position : position + 3].clone()
        accepted = min(1 + position % 3, len(drafted))
        drafted[accepted:] = torch.randn_like(drafted[accepted:])
        length = drafted.shape[0]
        positions = torch.arange(position, position + length)
        state_slots = torch.tensor([[2, 3, 4][:length]], dtype=torch.int32)
        reference.write_pooled_index_keys_decode(whole.cache, whole.window, drafted[None], whole.ape,
                                                 whole.slots(1, positions)[None], positions[None], state_slots,
                                                 torch.tensor([1]))
        # the next step starts from the window after the last accepted token
        whole.window[2] = whole.window[1 + accepted]
        position += accepted
    assert rel_err(whole.pool_keys(1), whole.pool_keys(0)) == 0
    assert torch.equal(whole.window[2], whole.window[1])


def test_picks_are_the_top_pools_expanded_then_the_unfinished_pool():
    layout = Layout([40], 8, 4)
    prefill(layout, [(0, 0, 40)])
    positions = torch.tensor([2, 3, 21, 39])
    q, w = torch.randn(4, 2, 8), torch.rand(4, 2)
    picks = reference.pooled_index_topk_paged(q, w, layout.cache, layout.table, torch.tensor([0, 4]), positions, 8, 4)
    assert picks.shape == (4, 11)
    assert picks[0].tolist() == [-1] * 8 + [0, 1, 2]
    assert picks[1].tolist()[:4] == [0, 1, 2, 3] and picks[1].tolist()[4:] == [-1] * 7
    scores = torch.relu(torch.einsum("hd,jd->hj", q[2], layout.pool_keys(0)[:5])).mul(w[2][:, None]).sum(0)
    best = sorted(scores.topk(2).indices.tolist())
    assert picks[2].tolist() == [p * 4 + i for p in best for i in range(4)] + [20, 21, -1]
    assert picks[3].tolist()[8:] == [-1, -1, -1]


@needs_triton
@pytest.mark.parametrize("lengths, history, dim, kpool, cache_kind", sizes(
    cpu=[((23, 9, 40), (0, 5, 61), 24, 3, "fp32"), ((17, 2), (31, 0), 32, 5, "mxfp8"),
         ((30, 1), (6, 70), 32, 4, "bf16")],
    gpu=[((3000, 977, 64), (0, 4100, 15), 128, 16, "mxfp8"), ((2048, 31), (0, 8), 128, 16, "bf16"),
         ((500, 7), (33, 0), 96, 3, "fp32")],
))
def test_prefill_write_matches_reference(lengths, history, dim, kpool, cache_kind):
    """Chunks of `lengths` tokens after `history` tokens of each sequence (their window in the slot), a padding
    token (slot_mapping -1) and a sequence without a window slot."""
    from dayzero.plugins.indexer.pool_kernel import write_pooled_index_keys_prefill_launcher

    dtype = torch.bfloat16 if cache_kind == "bf16" else torch.float32
    layout = Layout([h + n for h, n in zip(history, lengths)], dim, kpool, cache_kind == "mxfp8", dtype)
    if cache_kind == "bf16":
        layout.cache = layout.cache.bfloat16()
    spans = [(n, h, h + length) for n, (h, length) in enumerate(zip(history, lengths))]
    rows, slot_mapping, positions, cu, slots = layout.chunk(spans)
    slot_mapping[cu[1] - 1] = -1
    slots[-1] = -1 if history[-1] == 0 else slots[-1]
    expected_cache, expected_window = layout.cache.clone(), layout.window.clone()
    reference.write_pooled_index_keys_prefill(expected_cache, expected_window, rows, layout.ape, slot_mapping,
                                              positions, cu, slots)
    cache, window = layout.cache.to(DEVICE), layout.window.to(DEVICE)
    args = [t.to(DEVICE) for t in (rows, layout.ape, slot_mapping, positions, cu, slots)]
    write_pooled_index_keys_prefill_launcher(cache, window, *args)
    assert_same_cache(cache.cpu(), expected_cache, layout)
    assert torch.equal(window.cpu(), expected_window)


@needs_triton
@pytest.mark.parametrize("batch, length, dim, kpool, cache_kind", sizes(
    cpu=[(3, 1, 24, 3, "fp32"), (3, 3, 32, 5, "mxfp8"), (2, 4, 16, 2, "bf16")],
    gpu=[(64, 1, 128, 16, "mxfp8"), (64, 4, 128, 16, "bf16"), (7, 3, 96, 3, "fp32")],
))
def test_decode_write_matches_reference(batch, length, dim, kpool, cache_kind):
    """Rows of `length` tokens at varied positions, starting from the slot of a varied number of accepted tokens
    (the start slot is also the window slot of a token), one padding row."""
    from dayzero.plugins.indexer.pool_kernel import write_pooled_index_keys_decode_launcher

    gen = torch.Generator().manual_seed(1)
    dtype = torch.bfloat16 if cache_kind == "bf16" else torch.float32
    starts = torch.randint(kpool, 150, (batch,), generator=gen)
    layout = Layout([int(s) + length for s in starts], dim, kpool, cache_kind == "mxfp8", dtype)
    layout.window = torch.randn(batch * length + 1, kpool - 1, 2 * dim, generator=gen).to(dtype)
    if cache_kind == "bf16":
        layout.cache = layout.cache.bfloat16()
    positions = starts[:, None] + torch.arange(length)
    slot_mapping = torch.stack([layout.slots(b, positions[b]) for b in range(batch)])
    state_slots = (1 + torch.arange(batch * length).view(batch, length)).to(torch.int32)
    state_slots[-1] = -1
    num_accepted = torch.randint(1, length + 1, (batch,), generator=gen).to(torch.int32)
    rows = torch.randn(batch, length, 2 * dim, generator=gen).to(dtype)
    expected_cache, expected_window = layout.cache.clone(), layout.window.clone()
    reference.write_pooled_index_keys_decode(expected_cache, expected_window, rows, layout.ape, slot_mapping,
                                             positions, state_slots, num_accepted)
    cache, window = layout.cache.to(DEVICE), layout.window.to(DEVICE)
    args = [t.to(DEVICE) for t in (rows, layout.ape, slot_mapping, positions, state_slots, num_accepted)]
    write_pooled_index_keys_decode_launcher(cache, window, *args)
    assert_same_cache(cache.cpu(), expected_cache, layout)
    assert rel_err(window.cpu(), expected_window) == 0


def assert_same_cache(got: torch.Tensor, expected: torch.Tensor, layout: Layout) -> None:
    """Unwritten rows untouched, written ones equal up to the summation order (MXFP8: dequantized, a code apart at
    most where a rounding boundary falls between the two sums)."""
    if got.dtype != torch.uint8:
        assert rel_err(got.float(), expected.float()) < (1e-2 if got.dtype == torch.bfloat16 else 1e-6)
        return
    rows = torch.arange(got.shape[0] * pooled_rows_per_page(layout.kpool))
    ours = load_index_rows(got, rows, layout.dim, pooled_rows_per_page(layout.kpool))
    theirs = load_index_rows(expected, rows, layout.dim, pooled_rows_per_page(layout.kpool))
    finite = theirs.isfinite() & ours.isfinite()
    assert torch.equal(theirs.isfinite(), ours.isfinite()) and rel_err(ours[finite], theirs[finite]) < 0.07


@needs_triton
@pytest.mark.parametrize("lengths, new, heads, dim, topk, kpool, cache_kind", sizes(
    cpu=[((70, 200, 5), (1, 1, 1), 4, 32, 8, 4, "fp32"), ((130, 64, 2), (2, 2, 2), 2, 32, 16, 8, "mxfp8"),
         ((100, 40), (24, 17), 3, 32, 12, 4, "fp32"), ((70, 9), (40, 9), 2, 32, 16, 8, "mxfp8")],
    gpu=[((32768, 8000, 130), (1, 1, 1), 32, 128, 2048, 16, "mxfp8"), ((20000, 4100), (4, 4), 32, 128, 2048, 16,
                                                                          "bf16"),
         ((5000, 77), (5000, 77), 32, 128, 2048, 16, "mxfp8")],
))
def test_pooled_topk_matches_reference(lengths, new, heads, dim, topk, kpool, cache_kind):
    """Decode rows and prefill chunks (some queries before their first complete pool), more complete pools than
    kept and fewer."""
    from dayzero.plugins.indexer.pooled_select import pooled_index_topk_launcher

    gen = torch.Generator().manual_seed(2)
    layout = Layout(lengths, dim, kpool, cache_kind == "mxfp8")
    if cache_kind == "bf16":
        layout.cache = layout.cache.bfloat16()
    prefill(layout, [(n, 0, length) for n, length in enumerate(lengths)])
    positions = torch.cat([torch.arange(n - m, n) for n, m in zip(lengths, new)])
    cu = torch.tensor([0, *new]).cumsum(0).to(torch.int32)
    q, w = torch.randn(len(positions), heads, dim, generator=gen), torch.randn(len(positions), heads, generator=gen)
    args = dict(q=q, w=w, index_cache=layout.cache, block_table=layout.table, cu_seqlens=cu, positions=positions,
                topk=topk, kpool=kpool)
    expected = reference.pooled_index_topk_paged(**args)
    decode = max(new) <= 8
    options = {} if ON_GPU else CPU_DECODE if decode else CPU_PREFILL
    got = pooled_index_topk_launcher(**{k: v.to(DEVICE) if torch.is_tensor(v) else v for k, v in args.items()},
                                     **options)
    assert torch.equal(got.cpu(), expected)


def test_registered_ops_dispatch_to_reference_on_cpu():
    from dayzero.plugins import indexer

    layout = Layout([20], 8, 3)
    rows, slot_mapping, positions, cu, slots = layout.chunk([(0, 0, 20)])
    expected_cache, expected_window = layout.cache.clone(), layout.window.clone()
    reference.write_pooled_index_keys_prefill(expected_cache, expected_window, rows, layout.ape, slot_mapping,
                                              positions, cu, slots)
    indexer.write_pooled_index_keys_prefill(layout.cache, layout.window, rows, layout.ape, slot_mapping, positions,
                                            cu, slots)
    assert torch.equal(layout.cache, expected_cache) and torch.equal(layout.window, expected_window)
    q, w = torch.randn(20, 2, 8), torch.randn(20, 2)
    picks = indexer.pooled_index_topk_paged(q, w, layout.cache, layout.table, cu, positions, 6, 3)
    assert torch.equal(picks, reference.pooled_index_topk_paged(q, w, layout.cache, layout.table, cu, positions, 6, 3))


def test_onnx_runtime_kernels_of_the_nodes_run_the_reference():
    """The nodes as their translations write them (tests/export/test_onnx.py exports a GLM-5.3 decode graph)."""
    from dayzero.export.onnx_ort import KERNELS

    layout = Layout([20], 8, 3)
    rows, slot_mapping, positions, cu, slots = layout.chunk([(0, 0, 20)])
    cache, window = KERNELS["WritePooledIndexKeysPrefill"](layout.cache, layout.window, rows, layout.ape,
                                                           slot_mapping, positions, cu, slots)
    reference.write_pooled_index_keys_prefill(layout.cache, layout.window, rows, layout.ape, slot_mapping, positions,
                                              cu, slots)
    assert torch.equal(cache, layout.cache) and torch.equal(window, layout.window)
    q, w = torch.randn(20, 2, 8), torch.randn(20, 2)
    (picks,) = KERNELS["PooledIndexTopkPaged"](q, w, cache, layout.table, cu, positions, topk=6, kpool=3, scale=0.0,
                                               has_scale=False, has_q_scales=False)
    assert torch.equal(picks, reference.pooled_index_topk_paged(q, w, cache, layout.table, cu, positions, 6, 3))
