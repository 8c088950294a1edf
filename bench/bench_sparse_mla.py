"""Benchmark of the Triton MLA attention kernels (sparse Top-K decode / prefill, dense causal) on one GPU.

    PYTHONPATH=. python bench/bench_sparse_mla.py --out DIR [--prefill-tokens 32768] [--no-sweep]
    PYTHONPATH=. python bench/bench_sparse_mla.py --out DIR --quick-decode   # the four B64 decode cases, new vs old
    PYTHONPATH=. python bench/bench_sparse_mla.py --out DIR --quick-decode --gluon   # + the Gluon decode

Measures the ceilings first (device-to-device copy, bytes read + written; bf16 8192^3 matmul), checks every
benchmarked kernel against a vectorized torch equivalent of the reference on sampled tokens of the bench inputs,
then times it (triton.testing.do_bench, median; decode also as CUDA-graph replays of the rotated calls, as the engine
runs it, since an eager call's time can hold its host launch time). Decode reports bytes/s (B * topk * row bytes +
q + o) against the copy ceiling and TFLOP/s against the matmul ceiling (FLOPs = 2 * T * H * keys * (576 + 512));
prefill reports TFLOP/s. A few tile configs are swept on representative cases. Writes DIR/sparse_mla.json; prints a
table last.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path

import torch
import triton
import triton.testing

from bench.common import graph_replay_ms, long_graph_ms
from dayzero.plugins.paged_cache.formats import fp8_latent_record_bytes, pack_fp8_latent, unpack_fp8_latent
from dayzero.plugins.paged_cache.reference import PAGE_SIZE
from dayzero.plugins.sparse_mla import fp8_prefill, schedule
from dayzero.plugins.sparse_mla.gluon_decode_kernel import sparse_mla_decode_gluon_launcher
from dayzero.plugins.sparse_mla.kernel import dense_mla_launcher, sparse_mla_launcher

NOPE, ROPE, TOPK = 512, 64, 2048
L2_BYTES = 60 * 2**20
# calls of at most this many query tokens are decode-sized: also timed as CUDA-graph replays
DECODE_TOKENS = 1024
SM_SCALE = (128 + 64) ** -0.5
SWEEP = [(32, 2), (64, 2), (16, 3), (32, 4)]  # (block_n, num_stages) tried next to the default
# (block_n, num_stages, dv_blocks): programs that split the value columns (each recomputes the scores), against the
# [64, 512] accumulator's spills; off-device sm_90 builds at 8 warps (bench/triton_resources.py): the default config
# spills 456 B (FP8) / 272 B (BF16); BF16 n32 s2 dv2: no spills, 180 KB shared (s3 would need 233 KB: over the
# 227 KB limit); FP8 n32 s3 dv2: 272 B; FP8 n16 s3 dv4: 56 B
VALUE_BLOCK_SWEEP = [(32, 2, 2), (32, 3, 2), (16, 3, 4)]
# --decode-warps: the quick decode default also at these warp counts (16: a [64, 512] accumulator of 64 registers a
# thread, where 8 warps hold 128 of 255)
EXTRA_DECODE_WARPS: list[int] = []
# --gluon: the decode cases also time the Gluon decode kernel (gluon_decode_kernel.py, the op's decode on Hopper),
# under these config names (-> the launcher's options): the defaults, the index row scanned 256 slots a step (the
# default before run rb), all of the score block a warpgroup (`full_scores`; no longer timed by default: 0.081
# against 0.068 ms at H64 BF16 in run qa) and fp32 split partials (the default before run ta)
GLUON_CONFIGS = {"gluon": {}, "gluon-stepped-row-scan": {"row_scan": 256}, "gluon-full-scores": {"full_scores": True},
                 "gluon-fp32-partials": {"staged_partials": False}, "gluon-pdl-combine": {"pdl": True}}
GLUON_CONFIGS_OF = {fmt: ["gluon", "gluon-pdl-combine"] for fmt in ("bf16", "fp8")}
# FP8 prefill through a BF16 copy of the pages (fp8_prefill.py; what the op does in eager CUDA prefill)
BF16_COPY = "fp8-via-bf16-copy"
GLUON_DECODE: list[bool] = []


def bench_ms(fn, rep_ms: int = 200) -> float:
    return triton.testing.do_bench(fn, warmup=50, rep=rep_ms, return_mode="median")


def ceilings() -> dict:
    src = torch.randn(2**28, device="cuda")  # 1 GiB
    dst = torch.empty_like(src)
    copy_ms = bench_ms(lambda: dst.copy_(src))
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    mm_ms = bench_ms(lambda: a @ b)
    return {"copy_GBps": 2 * src.numel() * 4 / copy_ms / 1e6, "matmul_bf16_TFLOPs": 2 * 8192**3 / mm_ms / 1e9}


def random_cache(num_pages: int, fmt: str) -> torch.Tensor:
    """Random latent rows (never zeros) in the plain bf16 or the FP8 record layout."""
    if fmt == "bf16":
        return torch.randn(num_pages, PAGE_SIZE, NOPE + ROPE, device="cuda", dtype=torch.bfloat16)
    cache = torch.empty(num_pages * PAGE_SIZE, fp8_latent_record_bytes(NOPE, ROPE), device="cuda", dtype=torch.uint8)
    for start in range(0, cache.shape[0], 2**18):
        rows = torch.randn(min(2**18, cache.shape[0] - start), NOPE + ROPE, device="cuda")
        cache[start : start + rows.shape[0]] = pack_fp8_latent(rows, ROPE)
    return cache.view(num_pages, PAGE_SIZE, -1)


def shuffled_table(num_seqs: int, pages_per_seq: int) -> torch.Tensor:
    if INPUT_ORDER["pages"] == "in-order":
        return torch.arange(num_seqs * pages_per_seq, device="cuda").int().view(num_seqs, pages_per_seq)
    return torch.randperm(num_seqs * pages_per_seq, device="cuda").int().view(num_seqs, pages_per_seq)


# the order of a token's indices: "position" (ascending, as the indexer hands them over since the sixth session of
# 2026-12-04, so the gathers run in address order within each page) or "random" (as a Top-K by score did);
# --index-order. The page table: "shuffled" (pages anywhere in the
# cache, as after many requests came and went) or "in-order" (a sequence's pages contiguous, a fresh cache);
# --page-order
INPUT_ORDER = {"indices": "position", "pages": "shuffled"}


def random_indices(positions: torch.Tensor, topk: int, context: int) -> torch.Tensor:
    """Per token topk distinct random positions <= its position (all valid: positions >= topk - 1), in
    INPUT_ORDER["indices"]."""
    out = torch.empty(positions.shape[0], topk, device="cuda", dtype=torch.int32)
    keys = torch.arange(context, device="cuda")
    for start in range(0, positions.shape[0], 1024):
        pos = positions[start : start + 1024]
        score = torch.rand(pos.shape[0], context, device="cuda").masked_fill(keys[None, :] > pos[:, None], 2.0)
        out[start : start + pos.shape[0]] = score.topk(topk, dim=1, largest=False).indices.int()
    return out.sort(dim=1).values if INPUT_ORDER["indices"] == "position" else out


def gathered_rows(cache, table, seq, keys):
    """Latent rows (fp32) of logical `keys` [n, K] of sequences seq [n] -> [n, K, 576]."""
    phys = table.long()[seq[:, None], keys // PAGE_SIZE] * PAGE_SIZE + keys % PAGE_SIZE
    flat = cache.view(-1, cache.shape[-1])[phys.flatten()]
    rows = unpack_fp8_latent(flat, ROPE) if cache.dtype == torch.uint8 else flat.float()
    return rows.view(*keys.shape, -1)


def check_tokens(o, lse, q, rows, visible) -> dict:
    """Torch attention of q [n, H, D] over rows [n, K, D] (visible [n, K]) vs the kernel's (o, lse) of those tokens."""
    scores = torch.einsum("nhd,nkd->nhk", q.float(), rows) * SM_SCALE
    scores = scores.masked_fill(~visible[:, None, :], float("-inf"))
    ref_lse = scores.logsumexp(-1)
    ref_o = torch.einsum("nhk,nkd->nhd", torch.softmax(scores, -1), rows[..., :NOPE])
    err_o = ((o.float() - ref_o).norm() / ref_o.norm()).item()
    err_lse = ((lse - ref_lse).norm() / ref_lse.norm()).item()
    return {"rel_err_o": err_o, "rel_err_lse": err_lse, "correct": err_o < 2e-2 and err_lse < 5e-3}


def sample(count: int, total: int) -> torch.Tensor:
    return torch.randperm(total, device="cuda")[:count].sort().values


def sparse_case(name, tokens_per_seq, num_seqs, heads, context, fmt, configs, rotate=True):
    """num_seqs sequences of `context` rows; each has tokens_per_seq new tokens at its last positions."""
    pages_per_seq = -(-context // PAGE_SIZE)
    cache = random_cache(num_seqs * pages_per_seq, fmt)
    table = shuffled_table(num_seqs, pages_per_seq)
    tokens = num_seqs * tokens_per_seq
    positions = (context - tokens_per_seq + torch.arange(tokens_per_seq, device="cuda")).repeat(num_seqs)
    cu = torch.arange(num_seqs + 1, device="cuda", dtype=torch.int32) * tokens_per_seq
    row_bytes = cache.shape[-1] * cache.element_size()
    per_set = tokens * TOPK * row_bytes
    sets = max(1, min(3, math.ceil(3 * L2_BYTES / per_set))) if rotate else 1
    inputs = [(torch.randn(tokens, heads, NOPE + ROPE, device="cuda", dtype=torch.bfloat16),
               random_indices(positions, TOPK, context)) for _ in range(sets)]
    seq = torch.arange(num_seqs, device="cuda").repeat_interleave(tokens_per_seq)
    q, idx = inputs[0]
    picked = sample(min(16, tokens), tokens)
    rows = gathered_rows(cache, table, seq[picked], idx[picked].long())
    base = {"case": name, "kind": "sparse", "T": tokens, "H": heads, "topk": TOPK, "context": context, "cache": fmt,
            "input_sets": sets,
            "bytes": tokens * TOPK * row_bytes + q.numel() * 2 + tokens * heads * NOPE * 2,
            "flops": 2 * tokens * heads * TOPK * (NOPE + ROPE + NOPE)}
    records = []
    for cfg in configs:
        # every config is checked on the bench inputs, not only the default
        try:
            o, lse = sparse_launch(q, cache, table, cu, idx, cfg)
        except Exception as exc:  # a config over the shared memory limit must not stop the others
            records.append({**base, "config": config_name(cfg), "error": f"{type(exc).__name__}: {exc}"[:500]})
            continue
        check = check_tokens(o[picked], lse[picked], q[picked], rows, torch.ones_like(idx[picked], dtype=torch.bool))
        records.append(timed({**base, **check}, lambda c, i: sparse_launch(*_rotated(inputs, i, cache, table, cu), c),
                             cfg, sets))
    return records


def sparse_launch(q, cache, table, cu, idx, config):
    """The Triton launcher with `config`; for BF16_COPY, the FP8 pages decoded to a BF16 copy first (the op's FP8
    prefill, timed with the copy); the Gluon decode for a config name of GLUON_CONFIGS."""
    if config == BF16_COPY:
        cache, table = fp8_prefill.bf16_workspace(cache, table, cu, idx, ROPE)
        return sparse_mla_launcher(q, cache, table, cu, idx, SM_SCALE, NOPE)
    if isinstance(config, str):
        return sparse_mla_decode_gluon_launcher(q, cache, table, cu, idx, SM_SCALE, NOPE, **GLUON_CONFIGS[config])
    return sparse_mla_launcher(q, cache, table, cu, idx, SM_SCALE, NOPE, config=config)


def _rotated(inputs, i, cache, table, cu):
    q, idx = inputs[i % len(inputs)]
    return q, cache, table, cu, idx


def dense_case(name, tokens_per_seq, num_seqs, heads, context, fmt, configs):
    pages_per_seq = -(-context // PAGE_SIZE)
    cache = random_cache(num_seqs * pages_per_seq, fmt)
    table = shuffled_table(num_seqs, pages_per_seq)
    tokens = num_seqs * tokens_per_seq
    positions = (context - tokens_per_seq + torch.arange(tokens_per_seq, device="cuda")).repeat(num_seqs)
    cu = torch.arange(num_seqs + 1, device="cuda", dtype=torch.int32) * tokens_per_seq
    q = torch.randn(tokens, heads, NOPE + ROPE, device="cuda", dtype=torch.bfloat16)
    o, lse = dense_mla_launcher(q, cache, table, cu, positions, SM_SCALE, NOPE)
    picked = sample(min(8, tokens), tokens)
    keys = torch.arange(context, device="cuda").expand(picked.shape[0], context)
    seq = torch.arange(num_seqs, device="cuda").repeat_interleave(tokens_per_seq)[picked]
    check = check_tokens(o[picked], lse[picked], q[picked], gathered_rows(cache, table, seq, keys),
                         keys <= positions[picked][:, None])
    keys_total = int((positions + 1).sum())
    row_bytes = cache.shape[-1] * cache.element_size()
    base = {"case": name, "kind": "dense", "T": tokens, "H": heads, "context": context, "cache": fmt, **check,
            "bytes": num_seqs * context * row_bytes + q.numel() * 2 + tokens * heads * NOPE * 2,
            "flops": 2 * heads * keys_total * (NOPE + ROPE + NOPE)}
    run = lambda cfg, i: dense_mla_launcher(q, cache, table, cu, positions, SM_SCALE, NOPE, config=cfg)  # noqa: E731
    return [timed(base, run, cfg, 1) for cfg in configs]


class _Compiled:
    """`launch` wrapper that remembers the compiled attention kernel (registers, spills, shared memory)."""

    seen: dict = {}

    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            compiled = self.kernel[grid](*args, **kwargs)
            name = getattr(getattr(self.kernel, "fn", None), "__name__", "")
            if compiled is not None and name == "_mla_attention_kernel":
                _Compiled.seen = {"n_regs": getattr(compiled, "n_regs", None),
                                  "n_spills": getattr(compiled, "n_spills", None),
                                  "shared_bytes": getattr(compiled.metadata, "shared", None)}
            return compiled

        return run


def config_name(config):
    """A record's config: 'default' (None), a name (BF16_COPY, GLUON_CONFIGS), or the tile config's fields."""
    return "default" if config is None else config if isinstance(config, str) else vars(config).copy()


def long_graph(base: dict, run, config, sets: int) -> dict:
    """Per call in a graph of LONG_GRAPH_CALLS decode calls: its ms and GB/s, or the error (the rest of the record
    stands)."""
    try:
        ms = long_graph_ms([lambda i=i: run(config, i) for i in range(sets)], timer=lambda fn: bench_ms(fn, rep_ms=200))
    except Exception as exc:  # noqa: BLE001 - e.g. out of memory for 64 calls' outputs
        return {"long_graph_error": f"{type(exc).__name__}: {exc}"[:200]}
    return {"long_graph_ms": ms, "long_graph_GBps": base["bytes"] / ms / 1e6}


def timed(base: dict, run, config, sets: int) -> dict:
    record = dict(base)
    record["config"] = config_name(config)
    try:
        counter = iter(range(10**9))
        run(config, 0)
        torch.cuda.synchronize()
        ms = bench_ms(lambda: run(config, next(counter)), rep_ms=300 if base["flops"] > 1e12 else 200)
        record.update(ms=ms, GBps=base["bytes"] / ms / 1e6, TFLOPs=base["flops"] / ms / 1e9)
        if base["T"] <= DECODE_TOKENS:
            # decode runs inside the engine's CUDA graphs: the eager time above also holds the launchers' host time
            # whenever that exceeds the L2 flush the timer puts before each call (runs ff, fg: up to 2.5x between
            # passes of one config)
            graph = graph_replay_ms([lambda i=i: run(config, i) for i in range(sets)],
                                    timer=lambda fn: bench_ms(fn, rep_ms=200))
            record.update(graph_ms=graph, graph_GBps=base["bytes"] / graph / 1e6,
                          graph_TFLOPs=base["flops"] / graph / 1e9)
            record.update(long_graph(base, run, config, sets))
    except Exception as exc:  # one failing config must not stop the others
        record["error"] = f"{type(exc).__name__}: {exc}"[:500]
        traceback.print_exc()
    return record


def kernel_stats(launcher, *args, config=None) -> dict:
    _Compiled.seen = {}
    try:
        launcher(*args, launch=_Compiled, config=config)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return dict(_Compiled.seen)


def sweep_configs(heads: int, dense: bool = False) -> list:
    base = schedule.tile_config(heads, torch.bfloat16, dense=dense)
    configs = [None]
    for block_n, stages in SWEEP:
        cfg = schedule.TileConfig(base.block_h, base.tokens_per_block, block_n, base.num_warps, stages)
        if cfg != base:
            configs.append(cfg)
    return configs


def value_block_configs(heads: int, fmt: str) -> list:
    base = schedule.tile_config(heads, torch.bfloat16, dense=False)
    return [schedule.TileConfig(base.block_h, 1, block_n, base.num_warps, stages, dv_blocks=dv_blocks)
            for block_n, stages, dv_blocks in VALUE_BLOCK_SWEEP if not (fmt == "bf16" and stages > 2)]


def quick_decode_configs(heads: int, fmt: str) -> list:
    """The default next to prefill's tiles (32-key blocks, 3 stages), 64-key blocks and the deeper pipelines that
    keep gathers in flight during a block's dots: 32-key blocks 4 stages deep (offline sm_90 TTGIR: two blocks in
    flight, `async_wait {num = 4}`; 64-key blocks 2 deep wait for every copy before the dots, `num = 0`) and, for
    FP8 records (656 B a row), 64-key blocks 3 deep (231 KB of shared memory, one block in flight); FP8 also by
    conversion instructions (the old decode)."""
    narrow = schedule.tile_config(heads, torch.bfloat16, dense=False)
    wide = replace(narrow, block_n=64, num_stages=2)
    default = schedule.sparse_tile_config(heads, torch.bfloat16, fp8_latent_rows=fmt == "fp8")
    configs = [None] + [c for c in (narrow, wide, replace(narrow, num_stages=4)) if c != default]
    configs += [replace(default, num_warps=w) for w in EXTRA_DECODE_WARPS]
    if fmt == "fp8":
        configs.append(replace(default, e4m3_bits=False))
    return configs + GLUON_CONFIGS_OF[fmt] * bool(GLUON_DECODE)


def quick_decode_cases() -> list:
    return [(f"decode B64 H{h} {f}", lambda h=h, f=f: sparse_case(f"decode B64 H{h} {f}", 1, 64, h, 32768, f,
                                                                   quick_decode_configs(h, f)))
            for h in (128, 64) for f in ("fp8", "bf16")]


def cases(args) -> list:
    """(name, builder) pairs; builders return lists of records."""
    if args.quick_decode:
        return quick_decode_cases()
    sweep = not args.no_sweep
    prefill = args.prefill_tokens
    out = []
    # H=64 alternative: two 32-head programs per token (mma.sync, no split pass) instead of one 64-head wgmma program
    narrow = schedule.TileConfig(block_h=32, tokens_per_block=1, block_n=32, num_warps=8, num_stages=3)
    for heads in (128, 64):
        for fmt in ("fp8", "bf16"):
            configs = [None]
            if sweep and fmt == "fp8":
                configs = sweep_configs(heads) if heads == 128 else [None, narrow]
            if sweep or args.value_blocks:
                configs = configs + value_block_configs(heads, fmt)
            out.append((f"decode B64 H{heads} {fmt}",
                        lambda h=heads, f=fmt, c=configs: sparse_case(f"decode B64 H{h} {f}", 1, 64, h, 32768, f, c)))
    out.append(("decode B64x(1+3) H128 fp8", lambda: sparse_case("decode B64x(1+3) H128 fp8", 4, 64, 128, 32768,
                                                                 "fp8", [None])))
    if args.decode_only:
        return out
    if args.prefill_only:
        out = []
    for heads in (128, 64):
        configs = sweep_configs(heads) if sweep and heads == 128 else [None]
        out.append((f"prefill T{prefill} H{heads} bf16",
                    lambda h=heads, c=configs: sparse_case(f"prefill T{prefill} H{h} bf16", prefill, 1, h,
                                                           prefill + TOPK, "bf16", c, rotate=False)))
    old_fp8 = replace(schedule.tile_config(128, torch.bfloat16, dense=False), e4m3_bits=False)
    two_deep = schedule.sparse_tile_config(128, torch.bfloat16)
    out.append((f"prefill T{prefill} H128 fp8", lambda: sparse_case(f"prefill T{prefill} H128 fp8", prefill, 1, 128,
                                                                     prefill + TOPK, "fp8",
                                                                     [None, BF16_COPY, two_deep, old_fp8],
                                                                     rotate=False)))
    out.append(("dense decode B64 H32 ctx8192 bf16",
                lambda: dense_case("dense decode B64 H32 ctx8192 bf16", 1, 64, 32, 8192, "bf16", [None])))
    out.append(("dense prefill T8192 H32 bf16",
                lambda: dense_case("dense prefill T8192 H32 bf16", 8192, 1, 32, 8192, "bf16", [None])))
    return out


def fraction(record: dict, ceil: dict) -> None:
    if "ms" not in record:
        return
    if "graph_ms" in record:
        record["graph_frac_copy"] = record["graph_GBps"] / ceil["copy_GBps"]
        record["graph_frac_matmul"] = record["graph_TFLOPs"] / ceil["matmul_bf16_TFLOPs"]
    if "long_graph_ms" in record:
        record["long_graph_frac_copy"] = record["long_graph_GBps"] / ceil["copy_GBps"]
    record["frac_copy"] = record["GBps"] / ceil["copy_GBps"]
    record["frac_matmul"] = record["TFLOPs"] / ceil["matmul_bf16_TFLOPs"]
    # the slower of the two floors: what the hardware allows at best for this shape
    copy_ms = record["bytes"] / ceil["copy_GBps"] / 1e6
    floor_ms = max(copy_ms, record["flops"] / ceil["matmul_bf16_TFLOPs"] / 1e9)
    record["frac_roofline"] = floor_ms / record["ms"]
    # the largest fraction of copy a kernel could reach on this shape: below 1 where the MMA work outlasts the copy
    record["copy_bound"] = copy_ms / floor_ms


def print_table(ceil: dict, records: list) -> None:
    print(f"\nceilings: copy {ceil['copy_GBps']:.0f} GB/s, bf16 matmul {ceil['matmul_bf16_TFLOPs']:.0f} TFLOP/s")
    print(f"{'case':34} {'config':>18} {'ok':>3} {'ms':>9} {'GB/s':>7} {'%copy':>6} {'TFLOP/s':>8} {'%mm':>5} "
          f"{'%roof':>6} {'best%copy':>9} {'graph ms':>9} {'%copy':>6} {'TFLOP/s':>8} {'64-call graph ms':>16} "
          f"{'%copy':>6}")
    for r in records:
        c = r["config"]
        cfg = c if isinstance(c, str) else (f"h{c['block_h']} n{c['block_n']} s{c['num_stages']} w{c['num_warps']}"
                                        f"{' dv' + str(c['dv_blocks']) if c.get('dv_blocks', 1) > 1 else ''}"
                                        f"{' cvt' if not c.get('e4m3_bits', True) and 'fp8' in r['case'] else ''}")
        if "ms" not in r:
            print(f"{r['case']:34} {cfg:>18} ERROR {r.get('error', '')[:60]}")
            continue
        ok = "y" if r.get("correct") else "NO"
        graph = (f" {r['graph_ms']:9.3f} {100 * r['graph_frac_copy']:5.1f}% {r['graph_TFLOPs']:8.1f}"
                 if "graph_ms" in r else "")
        if "long_graph_ms" in r:
            graph += f" {r['long_graph_ms']:16.3f} {100 * r['long_graph_frac_copy']:5.1f}%"
        print(f"{r['case']:34} {cfg:>18} {ok:>3} {r['ms']:9.3f} {r['GBps']:7.0f} {100 * r['frac_copy']:5.1f}% "
              f"{r['TFLOPs']:8.1f} {100 * r['frac_matmul']:4.1f}% {100 * r['frac_roofline']:5.1f}% "
              f"{100 * r['copy_bound']:8.1f}%{graph}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--prefill-tokens", type=int, default=32768)
    parser.add_argument("--no-sweep", action="store_true", help="time the default tile config only")
    parser.add_argument("--value-blocks", action="store_true",
                        help="with --no-sweep: still time the value-column-block configs of the decode cases")
    parser.add_argument("--decode-only", action="store_true", help="the decode cases only")
    parser.add_argument("--prefill-only", action="store_true", help="the prefill and dense cases only")
    parser.add_argument("--quick-decode", action="store_true",
                        help="B64 decode only (H128/H64, FP8/BF16): default, old FP8 decode, 64-key blocks")
    parser.add_argument("--index-order", choices=("random", "position"), default="position",
                        help="each token's indices in random order (as by score) or ascending position")
    parser.add_argument("--page-order", choices=("shuffled", "in-order"), default="shuffled",
                        help="the page table: pages anywhere in the cache, or each sequence's pages contiguous")
    parser.add_argument("--decode-warps", type=lambda text: [int(w) for w in text.split(",")], default=[],
                        help="with --quick-decode: also time the default tiles at these warp counts, e.g. 16")
    parser.add_argument("--gluon", action="store_true",
                        help="with --quick-decode: also time the Gluon decode kernel (BF16 and FP8 cases)")
    args = parser.parse_args()
    EXTRA_DECODE_WARPS.extend(args.decode_warps)
    GLUON_DECODE.extend([True] * args.gluon)
    INPUT_ORDER.update(indices=args.index_order, pages=args.page_order)
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    start = time.time()
    ceil = ceilings()
    records = []
    for name, build in cases(args):
        try:
            for record in build():
                fraction(record, ceil)
                records.append(record)
        except Exception as exc:
            traceback.print_exc()
            records.append({"case": name, "config": "default", "error": f"{type(exc).__name__}: {exc}"[:500]})
        torch.cuda.empty_cache()
        print(f"[{time.time() - start:6.1f}s] {name}", file=sys.stderr, flush=True)
        # after every case: a run cut short by its time slot keeps what it measured
        (args.out / "sparse_mla.json").write_text(json.dumps({"ceilings": ceil, "records": records}, indent=1))
    stats = {} if args.quick_decode else compile_stats()
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "ceilings": ceil, "index_order": args.index_order, "page_order": args.page_order, "records": records,
              "compiled_kernels": stats,
              "wall_s": time.time() - start}
    (args.out / "sparse_mla.json").write_text(json.dumps(result, indent=1))
    print_table(ceil, records)
    return 0


def compile_stats() -> dict:
    """Registers / spills / shared memory of the attention kernel for the default configs (small inputs)."""
    out = {}
    for fmt in ("fp8", "bf16"):
        for heads in (128, 16):
            cache = random_cache(4, fmt)
            table = torch.arange(4, device="cuda", dtype=torch.int32)[None]
            q = torch.randn(2, heads, NOPE + ROPE, device="cuda", dtype=torch.bfloat16)
            cu = torch.tensor([0, 2], device="cuda", dtype=torch.int32)
            idx = torch.randint(0, 200, (2, 64), device="cuda", dtype=torch.int32)
            pos = torch.tensor([200, 201], device="cuda")
            out[f"sparse H{heads} {fmt}"] = kernel_stats(sparse_mla_launcher, q, cache, table, cu, idx, SM_SCALE, NOPE)
            out[f"dense H{heads} {fmt}"] = kernel_stats(dense_mla_launcher, q, cache, table, cu, pos, SM_SCALE, NOPE)
    return out


if __name__ == "__main__":
    sys.exit(main())
