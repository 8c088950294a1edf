"""Chunked KDA prefill: dayzero's Triton kernel vs flash-linear-attention 0.6.0 `chunk_kda` on the same inputs.

Shapes from issue 3: (B=1, T=8192, H=32), (B=1, T=32768, H=96), (B=8, T=4096, H=96), K = V = 128, bf16 q/k/v/beta,
fp32 log-space g, L2 norm of q and k in the kernel, zero initial state, final state returned.
Run on the H200: `PYTHONPATH=. python bench/bench_kda_prefill.py --out DIR`.
"""

from __future__ import annotations

import argparse
import traceback

import torch

from bench.common import copy_bandwidth_gbs, matmul_tflops, median_ms, rel_err, table, write_results
from dayzero.plugins.kda.chunk_kernel import chunk_kda_launcher

SHAPES = [(1, 8192, 32), (1, 32768, 96), (8, 4096, 96)]
K = V = 128


def make_inputs(B, T, H):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B * T, H, K, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(3))
    g = -torch.nn.functional.softplus(torch.randn(B * T, H, K, device="cuda", generator=gen)) * 0.1
    beta = torch.rand(B * T, H, device="cuda", generator=gen).to(torch.bfloat16)
    cu = torch.arange(0, (B + 1) * T, T, device="cuda", dtype=torch.int32)
    return q, k, v, g, beta, cu


def ours(q, k, v, g, beta, cu, block_v):
    return chunk_kda_launcher(q, k, v, g, beta, K ** -0.5, None, cu, True, True, state_block_v=block_v)


def fla_chunk(q, k, v, g, beta, cu, B, T):
    from fla.ops.kda import chunk_kda

    shape = (B, T, *q.shape[1:])
    return chunk_kda(q.view(shape), k.view(shape), v.view(shape), g.view(shape), beta.view(B, T, -1),
                     scale=K ** -0.5, output_final_state=True, use_qk_l2norm_in_kernel=True)


def bench_shape(B, T, H) -> dict:
    q, k, v, g, beta, cu = make_inputs(B, T, H)
    row = {"shape": f"B{B} T{T} H{H}", "B": B, "T": T, "H": H}
    results = {}
    for block_v in (32, 64):
        o, s = ours(q, k, v, g, beta, cu, block_v)
        results[block_v] = (o, s)
        row[f"ours_bv{block_v}_ms"] = round(median_ms(lambda bv=block_v: ours(q, k, v, g, beta, cu, bv)), 3)
    row["ours_ms"] = min(row["ours_bv32_ms"], row["ours_bv64_ms"])
    o, s = results[32]
    try:
        fo, fs = fla_chunk(q, k, v, g, beta, cu, B, T)
        row["fla_ms"] = round(median_ms(lambda: fla_chunk(q, k, v, g, beta, cu, B, T)), 3)
        row["speedup"] = round(row["fla_ms"] / row["ours_ms"], 2)
        row["err_o_vs_fla"] = f"{rel_err(o.float(), fo.reshape(o.shape).float()):.1e}"
        row["err_S_vs_fla"] = f"{rel_err(s, fs.float()):.1e}"
    except Exception as err:  # the peer is optional on this machine
        row["fla_error"] = f"{type(err).__name__}: {err}"[:200]
    return row


def reference_check() -> dict:
    """ours vs the fp32 reference on a small varlen problem (fla-independent)."""
    from dayzero.plugins.kda import reference as R

    lengths = [1000, 77, 1]
    q, k, v, g, beta, _ = make_inputs(1, sum(lengths), 8)
    cu = torch.tensor([0, *lengths], device="cuda").cumsum(0).int()
    S0 = torch.randn(len(lengths), 8, K, V, device="cuda")
    o, s = chunk_kda_launcher(q, k, v, g, beta, K ** -0.5, S0, cu, True, True)
    ro, rs = R.chunk_kda(*(x.float()[None] for x in (q, k, v, g, beta)), initial_state=S0, output_final_state=True,
                         use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    return {"err_o_vs_reference": rel_err(o.float(), ro[0]), "err_S_vs_reference": rel_err(s, rs)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    ceilings = {"copy_GBps": round(copy_bandwidth_gbs()), "bf16_matmul_TFLOPs": round(matmul_tflops())}
    check = reference_check()
    rows = []
    with torch.inference_mode():
        for B, T, H in SHAPES:
            try:
                rows.append(bench_shape(B, T, H))
            except Exception as err:
                rows.append({"shape": f"B{B} T{T} H{H}", "error": f"{type(err).__name__}: {err}"[:300]})
                traceback.print_exc()
            torch.cuda.empty_cache()
    write_results(args.out, "kda_prefill", {"ceilings": ceilings, "reference_check": check, "rows": rows})
    print("ceilings", ceilings, "| reference check", {k: f"{v:.1e}" for k, v in check.items()})
    print(table(rows, ["shape", "ours_bv32_ms", "ours_bv64_ms", "fla_ms", "speedup", "err_o_vs_fla", "err_S_vs_fla",
                       "fla_error", "error"]))


if __name__ == "__main__":
    main()
