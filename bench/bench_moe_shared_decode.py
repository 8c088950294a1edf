"""A MoE layer's decode step at the Kimi-Linear shape (D 2304, 256 experts of 1024, top-8, 1 shared expert, SwiGLU,
bf16) with its shared expert inside the routed experts' grouped GEMMs against the shared expert's own three
launches (gate-up GEMM, activation, down GEMM), each timed as a CUDA-graph replay.

    python -m bench.bench_moe_shared_decode [--out DIR]
"""

from __future__ import annotations

import torch

from bench.bench_moe import SHAPES, random_layer
from bench.common import graph_replay_ms, parser, print_tables, rel_err, write_result
from dayzero.model.moe import MoE

# 57-64 tokens of top-8 + shared pass 512 assignments: the permutation takes its block-count path there
TOKENS = (1, 4, 16, 32, 56, 64)


def _separate(layer: MoE, x: torch.Tensor) -> torch.Tensor:
    """The layer's decode step with the shared expert on its own launches."""
    y = layer._shared(x)
    return layer._experts(x, True, y)


def row(layer: MoE, dim: int, tokens: int) -> dict:
    x = torch.randn(tokens, dim, device="cuda", dtype=torch.bfloat16)
    if not layer._fuses_shared(x, decode=True):
        raise AssertionError(f"T{tokens}: the layer does not fuse its shared expert")
    fused_us = 1e3 * graph_replay_ms([lambda: layer(x, decode=True)])
    separate_us = 1e3 * graph_replay_ms([lambda: _separate(layer, x)])
    return {"case": f"T{tokens}", "tokens": tokens, "fused_us": fused_us, "separate_us": separate_us,
            "saved_us": separate_us - fused_us, "rel_err": rel_err(layer(x, decode=True), _separate(layer, x))}


def main() -> None:
    args = parser(__doc__).parse_args()
    torch.manual_seed(0)
    shape = next(s for s in SHAPES if s.name == "Kimi-Linear")
    with torch.inference_mode():
        layer = random_layer(shape)
        rows = [row(layer, shape.dim, tokens) for tokens in TOKENS]
    table = {"title": "Kimi-Linear MoE layer at decode, bf16, CUDA graph", "rows": rows,
             "columns": {"case": "case", "fused_us": "shared expert fused us", "separate_us": "separate us",
                         "saved_us": "saved us", "rel_err": "rel err"}}
    print_tables(write_result(args.out, "moe_shared_decode", {"layer": table}))


if __name__ == "__main__":
    main()
