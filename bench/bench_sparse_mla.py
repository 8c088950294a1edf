"""Sparse MLA attention over the paged latent cache: dayzero's `sparse_mla_paged` / `dense_mla_paged` ops against
the copy and bf16 matmul ceilings.

    python -m bench.bench_sparse_mla [--out DIR] [--prefill-tokens 32768]

Decode: B64, one token a sequence over 32K cached rows, top-2048 indices (ascending, as the indexer hands them over)
into shuffled pages, H in {64, 128}, BF16 or FP8 latent cache (656 B records, dequantized in the kernel, bf16 MMAs).
Bytes: the gathered rows + q + o; FLOPs: 2 * T * H * 2048 * (576 + 512). Timed as CUDA-graph replays (one call a
graph, and 64 calls a graph as a decode step runs them) and by kernel time (the profiler's, in 64-call graphs).
"best % of copy" is the most a kernel could reach on the shape: below 100 where the MMAs at the measured matmul
ceiling outlast the copy of its bytes. The op is what eager engines run (the Gluon decode on Hopper); the `exported`
column times the Triton kernel that AOTInductor engines run. Prefill: T new tokens, top-2048 over T + 2048 rows;
FP8 through the op decodes the pages it reads into a BF16 copy first (timed in); exported engines read FP8 in the
kernel. Every case is checked against a torch attention on sampled tokens first.
Targets: decode >= 60% of copy; prefill >= 250 TFLOP/s.
"""

from __future__ import annotations

import math

import torch

from bench.common import (
    L2_BYTES,
    attempt,
    bench_ms,
    copy_gbs,
    graph_replay_ms,
    kernel_ms,
    long_graph_ms,
    matmul_tflops,
    parser,
    print_tables,
    write_result,
)
from dayzero.plugins.paged_cache.formats import fp8_latent_record_bytes, pack_fp8_latent, unpack_fp8_latent
from dayzero.plugins.paged_cache.reference import PAGE_SIZE
from dayzero.plugins.sparse_mla import dense_mla_paged, sparse_mla_paged
from dayzero.plugins.sparse_mla.kernel import sparse_mla_launcher

NOPE, ROPE, TOPK = 512, 64, 2048
SM_SCALE = (128 + 64) ** -0.5
DECODE_CASES = [(128, "fp8"), (128, "bf16"), (64, "fp8"), (64, "bf16")]


def random_cache(num_pages: int, fmt: str) -> torch.Tensor:
    """Random latent rows (never zeros) in the plain bf16 or the FP8 record layout."""
    if fmt == "bf16":
        return torch.randn(num_pages, PAGE_SIZE, NOPE + ROPE, device="cuda", dtype=torch.bfloat16)
    cache = torch.empty(num_pages * PAGE_SIZE, fp8_latent_record_bytes(NOPE, ROPE), device="cuda", dtype=torch.uint8)
    for start in range(0, cache.shape[0], 2**18):
        rows = torch.randn(min(2**18, cache.shape[0] - start), NOPE + ROPE, device="cuda")
        cache[start : start + rows.shape[0]] = pack_fp8_latent(rows, ROPE)
    return cache.view(num_pages, PAGE_SIZE, -1)


def random_indices(positions: torch.Tensor, context: int) -> torch.Tensor:
    """Per token TOPK distinct random positions <= its position, ascending."""
    out = torch.empty(positions.shape[0], TOPK, device="cuda", dtype=torch.int32)
    keys = torch.arange(context, device="cuda")
    for start in range(0, positions.shape[0], 1024):
        pos = positions[start : start + 1024]
        score = torch.rand(pos.shape[0], context, device="cuda").masked_fill(keys[None, :] > pos[:, None], 2.0)
        out[start : start + pos.shape[0]] = score.topk(TOPK, dim=1, largest=False).indices.int()
    return out.sort(dim=1).values


def gathered_rows(cache, table, seq, keys):
    """Latent rows (fp32) of logical `keys` [n, K] of sequences seq [n] -> [n, K, 576]."""
    phys = table.long()[seq[:, None], keys // PAGE_SIZE] * PAGE_SIZE + keys % PAGE_SIZE
    flat = cache.view(-1, cache.shape[-1])[phys.flatten()]
    rows = unpack_fp8_latent(flat, ROPE) if cache.dtype == torch.uint8 else flat.float()
    return rows.view(*keys.shape, -1)


def check(o, lse, q, rows, visible) -> None:
    """Torch attention of q [n, H, D] over rows [n, K, D] (visible [n, K]) against the kernel's (o, lse)."""
    scores = torch.einsum("nhd,nkd->nhk", q.float(), rows) * SM_SCALE
    scores = scores.masked_fill(~visible[:, None, :], float("-inf"))
    ref_o = torch.einsum("nhk,nkd->nhd", torch.softmax(scores, -1), rows[..., :NOPE])
    err_o = ((o.float() - ref_o).norm() / ref_o.norm()).item()
    err_lse = ((lse - scores.logsumexp(-1)).norm() / scores.logsumexp(-1).norm()).item()
    if err_o > 2e-2 or err_lse > 5e-3:
        raise AssertionError(f"attention differs from torch: o {err_o:.1e}, lse {err_lse:.1e}")


class Case:
    """num_seqs sequences of `context` rows, each with `new` tokens at its last positions; `sets` query / index sets
    rotating over the one cache."""

    def __init__(self, new: int, num_seqs: int, heads: int, context: int, fmt: str, sets: int = 1,
                 sparse: bool = True):
        pages = -(-context // PAGE_SIZE)
        self.cache = random_cache(num_seqs * pages, fmt)
        self.table = torch.randperm(num_seqs * pages, device="cuda").int().view(num_seqs, pages)
        tokens = num_seqs * new
        self.positions = (context - new + torch.arange(new, device="cuda")).repeat(num_seqs)
        self.cu = torch.arange(num_seqs + 1, device="cuda", dtype=torch.int32) * new
        self.seq = torch.arange(num_seqs, device="cuda").repeat_interleave(new)
        self.context = context
        self.inputs = [(torch.randn(tokens, heads, NOPE + ROPE, device="cuda", dtype=torch.bfloat16),
                        random_indices(self.positions, context) if sparse else None) for _ in range(sets)]
        row_bytes = self.cache.shape[-1] * self.cache.element_size()
        self.bytes = tokens * TOPK * row_bytes + tokens * heads * (NOPE + ROPE) * 2 + tokens * heads * NOPE * 2
        self.flops = 2 * tokens * heads * TOPK * (NOPE + ROPE + NOPE)

    def calls(self, fn) -> list:
        """fn(q, cache, table, cu, indices) over the input sets, the first checked against torch."""
        q, idx = self.inputs[0]
        o, lse = fn(q, self.cache, self.table, self.cu, idx)
        picked = torch.randperm(q.shape[0], device="cuda")[:16].sort().values
        rows = gathered_rows(self.cache, self.table, self.seq[picked], idx[picked].long())
        check(o[picked], lse[picked], q[picked], rows, torch.ones_like(idx[picked], dtype=torch.bool))
        return [lambda q=q, idx=idx: fn(q, self.cache, self.table, self.cu, idx) for q, idx in self.inputs]

    def dense_call(self):
        """dense_mla_paged over every row up to each token's position, checked on 8 sampled tokens."""
        q, _ = self.inputs[0]
        call = lambda: dense_mla_paged(q, self.cache, self.table, self.cu, self.positions, SM_SCALE, NOPE)  # noqa: E731
        o, lse = call()
        picked = torch.randperm(q.shape[0], device="cuda")[:8].sort().values
        keys = torch.arange(self.context, device="cuda").expand(picked.shape[0], self.context)
        rows = gathered_rows(self.cache, self.table, self.seq[picked], keys)
        check(o[picked], lse[picked], q[picked], rows, keys <= self.positions[picked][:, None])
        return call


def op(q, cache, table, cu, idx):
    return sparse_mla_paged(q, cache, table, cu, idx, SM_SCALE, NOPE)


def exported(q, cache, table, cu, idx):
    return sparse_mla_launcher(q, cache, table, cu, idx, SM_SCALE, NOPE)


def decode_row(heads: int, fmt: str, ceilings: dict) -> dict:
    sets = max(1, min(3, math.ceil(3 * L2_BYTES / (64 * TOPK * (1152 if fmt == "bf16" else 656)))))
    case = Case(1, 64, heads, 32768, fmt, sets)
    copy_ms = case.bytes / ceilings["copy_gbs"] / 1e6
    floor_ms = max(copy_ms, case.flops / ceilings["bf16_matmul_tflops"] / 1e9)
    row = {"case": f"H{heads} {fmt.upper()}", "MB": case.bytes / 1e6, "GFLOP": case.flops / 1e9,
           "best_copy_pct": 100 * copy_ms / floor_ms}
    calls = case.calls(op)
    row["graph_ms"] = graph_replay_ms(calls)
    row["long_graph_ms"] = long_graph_ms(calls)
    row["kernel_us"] = kernel_ms(calls) * 1e3
    row["exported_graph_ms"] = graph_replay_ms(case.calls(exported))
    for key, ms in (("graph", row["graph_ms"]), ("long_graph", row["long_graph_ms"]),
                    ("kernel", row["kernel_us"] / 1e3)):
        row[f"{key}_copy_pct"] = 100 * copy_ms / ms
    return row


def dense_decode_row(ceilings: dict) -> dict:
    case = Case(1, 64, 32, 8192, "bf16", sparse=False)
    keys_total = int((case.positions + 1).sum())
    nbytes = 64 * 8192 * 1152 + 64 * 32 * (NOPE + ROPE) * 2 + 64 * 32 * NOPE * 2
    row = {"case": "dense H32 BF16, 8K context", "MB": nbytes / 1e6,
           "GFLOP": 2 * 32 * keys_total * (NOPE + ROPE + NOPE) / 1e9, "graph_ms": graph_replay_ms([case.dense_call()])}
    row["graph_copy_pct"] = 100 * nbytes / row["graph_ms"] / 1e6 / ceilings["copy_gbs"]
    return row


def prefill_row(tokens: int, heads: int, fmt: str, ceilings: dict) -> dict:
    case = Case(tokens, 1, heads, tokens + TOPK, fmt)
    row = {"case": f"T{tokens} H{heads} {fmt.upper()}"}
    row["ms"] = bench_ms(case.calls(op)[0], rep_ms=300)
    row["tflops"] = case.flops / row["ms"] / 1e9
    if fmt == "fp8":
        row["exported_tflops"] = case.flops / bench_ms(case.calls(exported)[0], rep_ms=300) / 1e9
    row["matmul_pct"] = 100 * row["tflops"] / ceilings["bf16_matmul_tflops"]
    return row


def dense_prefill_row(tokens: int, ceilings: dict) -> dict:
    case = Case(tokens, 1, 32, tokens, "bf16", sparse=False)
    flops = 2 * 32 * int((case.positions + 1).sum()) * (NOPE + ROPE + NOPE)
    ms = bench_ms(case.dense_call(), rep_ms=300)
    row = {"case": f"dense T{tokens} H32 BF16", "ms": ms, "tflops": flops / ms / 1e9}
    row["matmul_pct"] = 100 * row["tflops"] / ceilings["bf16_matmul_tflops"]
    return row



def tables(decode: list, prefill: list, ceilings: dict) -> dict:
    return {
        "decode": {"title": "Sparse MLA decode, B64, 32K context, top-2048", "rows": decode,
                   "columns": {"case": "case", "graph_ms": "graph ms", "graph_copy_pct": "% of copy",
                               "long_graph_copy_pct": "% of copy, 64-call graph", "kernel_us": "kernel us",
                               "kernel_copy_pct": "% of copy, kernel time", "best_copy_pct": "best % of copy",
                               "exported_graph_ms": "exported engine graph ms"},
                   "plot": {"x": "case", "y": ["graph_copy_pct", "kernel_copy_pct", "best_copy_pct"],
                            "ylabel": "% of copy GB/s", "hlines": [[60, "60% target"]]}},
        "prefill": {"title": "Sparse MLA prefill, top-2048", "rows": prefill,
                    "columns": {"case": "case", "ms": "ms", "tflops": "TFLOP/s",
                                "exported_tflops": "exported engine TFLOP/s", "matmul_pct": "% of matmul"},
                    "plot": {"x": "case", "y": ["tflops", "exported_tflops"], "ylabel": "TFLOP/s",
                             "hlines": [[250, "250 target"], [round(ceilings["bf16_matmul_tflops"]), "bf16 matmul"]]}},
    }


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--prefill-tokens", type=int, default=32768)
    args = p.parse_args()
    torch.manual_seed(0)
    ceilings = {"copy_gbs": copy_gbs(), "bf16_matmul_tflops": matmul_tflops()}
    decode, prefill = [], []
    with torch.inference_mode():
        for heads, fmt in DECODE_CASES:
            attempt(decode, f"H{heads} {fmt.upper()}", lambda h=heads, f=fmt: decode_row(h, f, ceilings))
        attempt(decode, "dense H32 BF16, 8K context", lambda: dense_decode_row(ceilings))
        tokens = args.prefill_tokens
        for heads, fmt in ((128, "bf16"), (64, "bf16"), (128, "fp8")):
            attempt(prefill, f"T{tokens} H{heads} {fmt.upper()}", lambda h=heads, f=fmt: prefill_row(
                tokens, h, f, ceilings))
        attempt(prefill, "dense T8192 H32 BF16", lambda: dense_prefill_row(8192, ceilings))
    path = write_result(args.out, "sparse_mla", tables(decode, prefill, ceilings), ceilings=ceilings)
    print_tables(path)


if __name__ == "__main__":
    main()
