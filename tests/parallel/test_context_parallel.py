"""Context-parallel engines on CPU (gloo, one worker process per extra rank) == the one-rank reference: chunked
prefill of prompts split zigzag over the ranks (chunks shorter than the conv window, ranks with no tokens), then
decode, compared step by step and cache by cache (KDA states and windows folded from the ranks' summaries, every
rank's latent and index rows)."""

from __future__ import annotations

import pytest
import torch

from dayzero.cache import CompilationCache
from dayzero.contract import allocate_flat_caches
from dayzero.export.build import export_engine
from dayzero.export.options import ExportOptions
from dayzero.export.rank_plan import RankPlan
from dayzero.llm.loader import start_ranks
from dayzero.model import load
from dayzero.model.checkpoint_writer import write_random_checkpoint
from dayzero.model.eager_engine import EagerEngine, eager_manifest
from dayzero.model.step import contiguous_meta
from tests.helpers import TINY_CONFIG, rel_err

SLOTS_PER_SEQ = 2


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_random_checkpoint(TINY_CONFIG, tmp_path_factory.mktemp("cp") / "tiny", torch.float32, seed=5)


def _steps(engine, caches, prompts: list[list[int]], decode_tokens: list[list[list[int]]],
           pages: int) -> list[torch.Tensor]:
    """Prefill in two chunks (the second continues the prompts long enough to have one after cached context; they
    come first, so contiguous_meta lays them out as the whole batch), then decode."""
    first = [len(p) // 2 or len(p) for p in prompts]
    out = [engine.prefill(torch.tensor(sum((p[:n] for p, n in zip(prompts, first)), [])),
                          contiguous_meta([0] * len(prompts), first, pages, SLOTS_PER_SEQ), caches)]
    rest = [(p[n:], n) for p, n in zip(prompts, first) if len(p) > n]
    out.append(engine.prefill(torch.tensor(sum((r for r, _ in rest), [])),
                              contiguous_meta([n for _, n in rest], [len(r) for r, _ in rest], pages, SLOTS_PER_SEQ),
                              caches))
    done = [len(p) for p in prompts]
    for tokens in decode_tokens:
        meta = contiguous_meta(done, [2] * len(prompts), pages, SLOTS_PER_SEQ, decode=True)
        out.append(engine.decode(torch.tensor(tokens), meta, caches))
        done = [d + 2 for d in done]
    return out


def _same_cache(got: torch.Tensor, expected: torch.Tensor, tolerance: float) -> bool:
    if got.dtype != torch.uint8:
        return rel_err(got, expected) < tolerance
    # MXFP8 bytes: a rank projects its keys in a batch of another size, and a value that sits on an e4m3 rounding
    # boundary may round one code apart
    apart = (got.int() - expected.int()).abs()
    return apart.max() <= 1 and (apart > 0).float().mean() < 1e-3


@pytest.mark.parametrize("cp, lengths, index_cache", [
    (2, [37, 70, 3], "bf16"),
    (3, [61, 5, 2], "mxfp8"),
    (3, [4, 2, 1], "bf16"),  # the first step's chunks leave rank 2 nothing but padding
], ids=["cp2", "cp3-mxfp8", "cp3-short"])
def test_context_parallel_ranks_match_one_rank(checkpoint, tmp_path, cp, lengths, index_cache):
    _compare_with_one_rank(checkpoint, tmp_path, cp, lengths, index_cache, "cpu", 1e-5)


def test_context_and_tensor_parallel_mesh_matches_one_rank(checkpoint, tmp_path):
    """cp 2 x tp 2: four ranks; each TP pair splits the heads of its chunks' tokens, each CP pair the tokens of its
    heads (tiny-hybrid's latent MoE: the TP partial sums reduce over the pair's subgroup)."""
    _compare_with_one_rank(checkpoint, tmp_path, 2, [37, 70, 3], "bf16", "cpu", 1e-5, tp=2)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
@pytest.mark.parametrize("index_cache", ["bf16", "mxfp8"])
def test_context_parallel_gpu_ranks_match_one_rank(checkpoint, tmp_path, index_cache):
    """The Triton kernels on padded and split segments, NCCL all-gathers (fp32 weights: tf32 dots bound the error)."""
    _compare_with_one_rank(checkpoint, tmp_path, 2, [300, 131, 3], index_cache, "cuda", 2e-2)


def _compare_with_one_rank(checkpoint, tmp_path, cp: int, lengths: list[int], index_cache: str, device: str,
                           tolerance: float, tp: int = 1) -> None:
    gen = torch.Generator().manual_seed(cp)
    prompts = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in lengths]
    decode_tokens = [torch.randint(0, 256, (len(lengths), 2), generator=gen).tolist() for _ in range(2)]
    options = ExportOptions(backend="eager", cp=cp, tp=tp, max_batch=4, index_cache=index_cache, device=device)
    entry, _ = export_engine(checkpoint, options, CompilationCache(tmp_path))
    model = load(checkpoint, dtype=torch.float32, device=options.rank_device(0))  # the whole model, one rank
    reference = EagerEngine(model, eager_manifest(model, options.cache_format, 4))
    pages_per_seq = -(-max(lengths) // 64) + 1
    num_pages, num_slots = pages_per_seq * len(lengths), SLOTS_PER_SEQ * len(lengths)
    expected_caches = allocate_flat_caches(reference.manifest, num_pages, num_slots)
    expected = _steps(reference, expected_caches, prompts, decode_tokens, pages_per_seq)
    engine = start_ranks(entry, options.ranks, [options.rank_device(rank) for rank in range(options.ranks)])
    assert engine.decodes_alone == engine.graph_capturable == (tp == 1)
    try:
        caches = allocate_flat_caches(engine.manifest, num_pages, num_slots)
        got = _steps(engine, caches, prompts, decode_tokens, pages_per_seq)
    finally:
        workers = list(engine.workers)
        engine.close()
    assert [process.returncode for process in workers] == [0] * (options.ranks - 1)
    for step, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape and rel_err(g, e) < tolerance, step
    rank0 = RankPlan(tp, 0)
    for spec, g, e in zip(engine.manifest.cache_tensors, caches, expected_caches):
        # a tensor-parallel rank 0 holds the first 1/tp of the KDA heads (states and conv channels)
        assert _same_cache(g, rank0.shard(e, g.shape), tolerance), (spec.layer, spec.name)


def test_more_ranks_than_gpus_is_refused_before_anything_loads(tmp_path):
    from dayzero.errors import DayzeroError
    from dayzero.llm.loader import load_step_engine

    with pytest.raises(DayzeroError, match="needs 64 GPUs from cuda:0; this host has"):
        load_step_engine(tmp_path / "no-checkpoint", ExportOptions(backend="eager", cp=64, device="cuda"))
