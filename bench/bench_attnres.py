"""AttnRes depth mix: dayzero's `attnres_mix` kernels against fla 0.6.0 `fused_attnres` and the copy ceiling.

    python -m bench.bench_attnres [--out DIR]

Cases: sources {2, 8, 9} x tokens {1, 64, 8192} x D {2304, 7168}, bf16 sources, fp32 math; then the K3.1 variants
(9 sources, D 7168: blocks + partial, the emitted norm). Every case is checked against the fp32 reference first.
Times: CUDA-graph replay per call of calls rotating over enough input copies to exceed the L2 (how a decode step
runs them; eager calls are bound by the host's launch path), and the kernel's own duration in a graph of 64 calls
(the profiler's) against a 1 GiB copy kernel timed the same way. Bytes: every source read once + the output written.
Targets: >= 1.0x fla everywhere, <= 10 us at decode sizes, >= 85% of copy at 8192 tokens.
"""

from __future__ import annotations

import itertools
import math
import traceback

import torch

from bench.common import (
    L2_BYTES,
    copy_gbs,
    copy_kernel_gbs,
    graph_replay_ms,
    kernel_ms,
    parser,
    print_tables,
    rel_err,
    write_result,
)
from dayzero.plugins.attnres import reference
from dayzero.plugins.attnres.kernel import DECODE_TOKENS, attnres_mix_blocks_launcher, attnres_mix_launcher

DTYPE = torch.bfloat16
EPS = 1e-6


def load_fla():
    try:
        from fla.ops.attnres import fused_attnres
    except Exception as error:  # noqa: BLE001 - any import failure means no peer column
        print(f"fla is not importable ({type(error).__name__}: {error}): no peer column")
        return None
    return fused_attnres


def make_sets(num_sources: int, tokens: int, dim: int):
    """query, rms_weight and enough copies of the sources to touch three L2s a cycle."""
    copies = max(1, min(1024, math.ceil(3 * L2_BYTES / ((num_sources + 1) * tokens * dim * 2))))
    query = torch.randn(dim, device="cuda")
    rms_weight = torch.rand(dim, device="cuda") + 0.5
    sets = [[torch.randn(tokens, dim, device="cuda", dtype=DTYPE) * (1 + i) for i in range(num_sources)]
            for _ in range(copies)]
    return query, rms_weight, sets


def graph_us(calls) -> float:
    return graph_replay_ms(calls) * 1e3


def mix_case(num_sources: int, tokens: int, dim: int, fla, kernel_gbs: float) -> dict:
    query, rms_weight, sets = make_sets(num_sources, tokens, dim)
    nbytes = (num_sources + 1) * tokens * dim * 2
    expected = reference.attnres_mix(query, sets[0], rms_weight, EPS)
    error = rel_err(attnres_mix_launcher(query, sets[0], rms_weight, EPS)[0], expected)
    if error > 1e-2:
        raise AssertionError(f"dayzero differs from the reference: {error}")
    ours = [lambda s=s: attnres_mix_launcher(query, s, rms_weight, EPS) for s in sets]
    row = {"case": f"{num_sources}x{tokens}x{dim}", "sources": num_sources, "tokens": tokens, "dim": dim,
           "rel_err": error, "dayzero_graph_us": graph_us(ours), "dayzero_kernel_us": kernel_ms(ours[:64]) * 1e3}
    row["kernel_copy_pct"] = 100 * nbytes / row["dayzero_kernel_us"] / 1e3 / kernel_gbs
    if fla is not None:
        with torch.inference_mode():
            row["fla_graph_us"] = graph_us([lambda s=s: fla(query, s, rms_weight, rms_eps=EPS) for s in sets])
        row["speedup"] = row["fla_graph_us"] / row["dayzero_graph_us"]
    return row


def variant_rows(tokens: int, dim: int, fla) -> list[dict]:
    """K3.1 sizes: the mix over stacked blocks + the partial sum, and the mix with its RMSNorm emitted."""
    num_sources = 9
    query, rms_weight, sets = make_sets(num_sources, tokens, dim)
    blocks = [torch.stack(s[:-1]) for s in sets]
    norm_weight = torch.rand(dim, device="cuda") + 0.5
    got, _ = attnres_mix_blocks_launcher(query, blocks[0], num_sources - 1, sets[0][-1], rms_weight, EPS)
    error = rel_err(got, reference.attnres_mix(query, sets[0], rms_weight, EPS))
    if error > 1e-2:
        raise AssertionError(f"blocks + partial differs from the reference: {error}")
    rows = [{"variant": "blocks + partial", "tokens": tokens, "dim": dim, "dayzero_graph_us": graph_us(
        [lambda b=b, s=s: attnres_mix_blocks_launcher(query, b, num_sources - 1, s[-1], rms_weight, EPS)
         for b, s in zip(blocks, sets)])}]
    norm = {"variant": "emitted norm", "tokens": tokens, "dim": dim, "dayzero_graph_us": graph_us(
        [lambda s=s: attnres_mix_launcher(query, s, rms_weight, EPS, norm_weight, EPS) for s in sets])}
    if fla is not None:
        with torch.inference_mode():
            norm["fla_graph_us"] = graph_us([lambda s=s: fla(query, s, rms_weight, rms_eps=EPS,
                                                             output_rms_weight=norm_weight) for s in sets])
    return rows + [norm]


MIX_COLUMNS = {"case": "sources x T x D", "dayzero_graph_us": "dayzero us", "fla_graph_us": "fla us",
               "speedup": "vs fla"}


def tables(decode: list, prefill: list, variants: list) -> dict:
    return {
        "decode": {"title": "AttnRes mix at decode sizes, graph replay per call", "columns": MIX_COLUMNS,
                   "rows": decode, "plot": {"x": "case", "y": ["dayzero_graph_us", "fla_graph_us"],
                                            "ylabel": "us per call", "hlines": [[10, "10 us target"]]}},
        "prefill": {"title": "AttnRes mix at 8192 tokens", "rows": prefill,
                    "columns": {**MIX_COLUMNS, "dayzero_kernel_us": "kernel us",
                                "kernel_copy_pct": "% of copy (kernel time)"},
                    "plot": {"x": "case", "y": ["kernel_copy_pct"], "ylabel": "% of the copy kernel's GB/s",
                             "hlines": [[85, "85% target"], [100, "copy"]]}},
        "variants": {"title": "K3.1 variants (9 sources, D 7168), graph replay per call", "rows": variants,
                     "columns": {"variant": "variant", "tokens": "T", "dayzero_graph_us": "dayzero us",
                                 "fla_graph_us": "fla us"}},
    }


def main() -> None:
    args = parser(__doc__).parse_args()
    torch.manual_seed(0)
    fla = load_fla()
    ceilings = {"copy_gbs": copy_gbs(), "copy_kernel_gbs": copy_kernel_gbs()}
    decode, prefill, variants = [], [], []
    for num_sources, tokens, dim in itertools.product((2, 8, 9), (1, 64, 8192), (2304, 7168)):
        try:
            row = mix_case(num_sources, tokens, dim, fla, ceilings["copy_kernel_gbs"])
        except Exception as error:  # noqa: BLE001 - one failing case must not stop the rest
            traceback.print_exc()
            row = {"case": f"{num_sources}x{tokens}x{dim}", "error": repr(error)[:300]}
        (decode if tokens <= DECODE_TOKENS else prefill).append(row)
        torch.cuda.empty_cache()
    for tokens in (64, 8192):
        variants += variant_rows(tokens, 7168, fla)
    path = write_result(args.out, "attnres", tables(decode, prefill, variants), ceilings=ceilings,
                        peer="fla 0.6.0 fused_attnres" if fla else None)
    print_tables(path)


if __name__ == "__main__":
    main()
