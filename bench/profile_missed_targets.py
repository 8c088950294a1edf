"""One call of each kernel that misses a bandwidth target, inside a profiler range, for Nsight Compute: where the
time goes when no counter is read otherwise (bench/README.md: KDA pool B64 H32 80% of copy, AttnRes 2 x 8192 x 2304
82%, indexer decode 17-50%, sparse MLA decode 11-32%). A kernel that meets its target is profiled beside each for
contrast (the KDA pool at B256 H96, 93%; the AttnRes mix at 9 x 8192 x 7168, 99%). Everything is warmed up
(compiled, fla autotuned) before the range opens.

    ncu --clock-control none --profile-from-start off \\
        --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \\
        --section SchedulerStats --section MemoryWorkloadAnalysis python3 bench/profile_missed_targets.py [CASES]

CASES (comma-separated, default all): kda, attnres, indexer, indexer_long, sparse_mla, sparse_mla_gluon.
"""

from __future__ import annotations

import sys

import torch

from bench import bench_attnres as attnres
from bench import bench_indexer as indexer
from bench import bench_kda_decode as kda
from bench import bench_sparse_mla as sparse_mla


def kda_calls() -> list:
    calls = []
    fla = kda.load_fla()
    for batch, heads in ((64, 32), (256, 96)):
        _, sets = kda.make_sets(batch, heads)
        p = kda.make_params(heads, len(sets) * batch)
        u = kda.unfused_inputs(sets[0], p)
        calls.append(lambda u=u, s=sets[0], p=p: kda.run_pool(u, s, p["state"], (32, 1, False)))
        if fla is not None:
            out = torch.empty_like(u["v"])
            calls.append(lambda u=u, s=sets[0], p=p, o=out: kda.run_fla(fla, u, s, p, p["state"], o, False))
    return calls


def attnres_calls() -> list:
    calls = []
    for sources, dim in ((2, 2304), (9, 7168)):
        query, rms_weight, sets = attnres.make_sets(sources, 8192, dim, 1)
        calls += attnres.ours_calls(query, rms_weight, sets)
    return calls


def indexer_calls() -> list:
    calls = []
    for quantized in (True, False):
        case = indexer.paged_inputs([32768] * indexer.BATCH, [1] * indexer.BATCH, 32, quantized, mxfp8_query=quantized)
        calls.append(lambda case=case: indexer.index_topk_paged_launcher(**case, topk=indexer.TOPK, phase="decode"))
    return calls


def indexer_long_calls() -> list:
    """The select kernels at 128K keys, HI 32, MXFP8 (the split kernel's longest case)."""
    case = indexer.paged_inputs([131072] * indexer.BATCH, [1] * indexer.BATCH, 32, True, mxfp8_query=True)
    return [lambda: indexer.index_topk_paged_launcher(**case, topk=indexer.TOPK, phase="decode")]


def sparse_mla_decode_inputs(fmt: str, heads: int) -> tuple:
    """B64 decode over a 32K context, top-2048: (q, cache, table, cu, idx)."""
    pages = -(-32768 // sparse_mla.PAGE_SIZE)
    cache = sparse_mla.random_cache(64 * pages, fmt)
    table = sparse_mla.shuffled_table(64, pages)
    positions = torch.full((64,), 32767, device="cuda")
    cu = torch.arange(65, device="cuda", dtype=torch.int32)
    q = torch.randn(64, heads, sparse_mla.NOPE + sparse_mla.ROPE, device="cuda", dtype=torch.bfloat16)
    return q, cache, table, cu, sparse_mla.random_indices(positions, sparse_mla.TOPK, 32768)


def _decode_calls(launcher, heads: int) -> list:
    """launcher(q, cache, table, cu, idx, sm_scale, v_dim) over FP8 then BF16 decode inputs."""
    inputs = [sparse_mla_decode_inputs(fmt, heads) for fmt in ("fp8", "bf16")]
    return [lambda args=args: launcher(*args, sparse_mla.SM_SCALE, sparse_mla.NOPE) for args in inputs]


def sparse_mla_calls() -> list:
    """The Triton kernel at H64, FP8 and BF16."""
    return _decode_calls(sparse_mla.sparse_mla_launcher, 64)


def sparse_mla_gluon_calls() -> list:
    """The Gluon decode (the op's on Hopper) at H128 (one program a token and head block, no splits), FP8 and BF16."""
    return _decode_calls(sparse_mla.sparse_mla_decode_gluon_launcher, 128)


CASES = {"kda": kda_calls, "attnres": attnres_calls, "indexer": indexer_calls, "indexer_long": indexer_long_calls,
         "sparse_mla": sparse_mla_calls, "sparse_mla_gluon": sparse_mla_gluon_calls}


def main() -> None:
    names = sys.argv[1].split(",") if len(sys.argv) > 1 else list(CASES)
    torch.manual_seed(0)
    with torch.inference_mode():
        calls = [call for name in names for call in CASES[name]()]
        for _ in range(2):
            for call in calls:
                call()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        for call in calls:
            call()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    print(f"profiled {len(calls)} calls: {', '.join(names)}")


if __name__ == "__main__":
    main()
