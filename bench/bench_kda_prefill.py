"""Chunked KDA prefill: dayzero's `chunk_kda` kernels against flash-linear-attention 0.6.0 `chunk_kda`.

    python -m bench.bench_kda_prefill [--out DIR] [--no-reference-check]

Shapes (B, T, H): (1, 8192, 32), (8, 4096, 96), (1, 32768, 96); K = V = 128, bf16 q/k/v/beta, fp32 log-space g,
L2 norm of q and k in the kernel, zero initial state, final state returned. Times in ms: eager calls (each side's
Python launch path included) and CUDA-graph replays (GPU time alone); dayzero's stages from the profiler. First a
varlen check against the fp32 reference (lengths 1000 / 77 / 1, an initial state), and every shape against fla.
Target: >= 1.0x fla at every shape.
"""

from __future__ import annotations

import traceback

import torch

from bench.common import (
    bench_ms,
    graph_replay_ms,
    kernel_breakdown_us,
    matmul_tflops,
    parser,
    print_tables,
    rel_err,
    write_result,
)
from dayzero.plugins.kda import reference as R
from dayzero.plugins.kda.chunk_kernel import chunk_kda_launcher

SHAPES = [(1, 8192, 32), (8, 4096, 96), (1, 32768, 96)]
K = V = 128
# dayzero's stages: the profiler's kernel names that hold each
STAGES = {"gate_ms": "gate_cumsum", "pair_ms": "pairs", "solve_ms": "solve", "wy_ms": "wy_kernel",
          "state_ms": "_state_kernel"}


def make_inputs(B: int, T: int, H: int):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B * T, H, K, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(3))
    g = -torch.nn.functional.softplus(torch.randn(B * T, H, K, device="cuda", generator=gen)) * 0.1
    beta = torch.rand(B * T, H, device="cuda", generator=gen).to(torch.bfloat16)
    cu = torch.arange(0, (B + 1) * T, T, device="cuda", dtype=torch.int32)
    return q, k, v, g, beta, cu


def ours(q, k, v, g, beta, cu, initial_state=None):
    return chunk_kda_launcher(q, k, v, g, beta, K**-0.5, initial_state, cu, True, True)


def fla_chunk(q, k, v, g, beta, B: int, T: int):
    from fla.ops.kda import chunk_kda

    shape = (B, T, *q.shape[1:])
    return chunk_kda(q.view(shape), k.view(shape), v.view(shape), g.view(shape), beta.view(B, T, -1),
                     scale=K**-0.5, output_final_state=True, use_qk_l2norm_in_kernel=True)


def reference_check() -> dict:
    """dayzero against the fp32 reference on a small varlen problem with an initial state (fla-independent)."""
    lengths = [1000, 77, 1]
    q, k, v, g, beta, _ = make_inputs(1, sum(lengths), 8)
    cu = torch.tensor([0, *lengths], device="cuda").cumsum(0).int()
    S0 = torch.randn(len(lengths), 8, K, V, device="cuda")
    ro, rs = R.chunk_kda(*(x.float()[None] for x in (q, k, v, g, beta)), initial_state=S0, output_final_state=True,
                         use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    o, s = ours(q, k, v, g, beta, cu, S0)
    return {"err_o_vs_reference": rel_err(o.float(), ro[0]), "err_state_vs_reference": rel_err(s, rs)}


def stage_times(fn, stages: dict[str, str] = STAGES) -> dict:
    """ms per call of each stage: the kernels whose names hold the stage's part."""
    kernels = kernel_breakdown_us(fn)
    return {stage: sum(us for name, us in kernels.items() if part in name) / 1e3 for stage, part in stages.items()}


def bench_shape(B: int, T: int, H: int) -> dict:
    q, k, v, g, beta, cu = make_inputs(B, T, H)
    row = {"shape": f"B{B} T{T} H{H}", "B": B, "T": T, "H": H}
    run = lambda: ours(q, k, v, g, beta, cu)  # noqa: E731
    o, s = run()
    row["dayzero_ms"] = bench_ms(run)
    row["dayzero_graph_ms"] = graph_replay_ms([run])
    row.update(stage_times(run))
    try:
        peer = lambda: fla_chunk(q, k, v, g, beta, B, T)  # noqa: E731
        fo, fs = peer()
    except Exception as error:  # noqa: BLE001 - the peer is optional on this machine
        row["fla_error"] = f"{type(error).__name__}: {error}"[:200]
        return row
    row["err_o_vs_fla"] = rel_err(o.float(), fo.reshape(o.shape).float())
    row["err_state_vs_fla"] = rel_err(s, fs.float())
    row["fla_ms"] = bench_ms(peer)
    row["fla_graph_ms"] = graph_replay_ms([peer])
    row["speedup"] = row["fla_ms"] / row["dayzero_ms"]
    row["speedup_graph"] = row["fla_graph_ms"] / row["dayzero_graph_ms"]
    return row


COLUMNS = {"shape": "shape", "dayzero_ms": "dayzero eager ms", "fla_ms": "fla eager ms",
           "dayzero_graph_ms": "dayzero graph ms", "fla_graph_ms": "fla graph ms", "speedup_graph": "vs fla (graph)",
           "pair_ms": "pair", "solve_ms": "solve", "wy_ms": "WY", "state_ms": "state"}


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--no-reference-check", action="store_true", help="skip the varlen fp32 reference check")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    check = {} if args.no_reference_check else reference_check()
    rows = []
    with torch.inference_mode():
        for B, T, H in SHAPES:
            try:
                rows.append(bench_shape(B, T, H))
            except Exception as error:  # noqa: BLE001 - one failing shape must not stop the others
                traceback.print_exc()
                rows.append({"shape": f"B{B} T{T} H{H}", "error": f"{type(error).__name__}: {error}"[:300]})
            torch.cuda.empty_cache()
    tables = {"prefill": {"title": "KDA chunked prefill, K = V = 128", "columns": COLUMNS, "rows": rows,
                          "plot": {"x": "shape", "y": ["dayzero_graph_ms", "fla_graph_ms"],
                                   "ylabel": "ms (graph replay)"}}}
    path = write_result(args.out, "kda_prefill", tables, ceilings={"bf16_matmul_tflops": matmul_tflops()},
                        reference_check=check, peer="fla 0.6.0 chunk_kda")
    print_tables(path)


if __name__ == "__main__":
    main()
