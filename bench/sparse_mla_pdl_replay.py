"""Graph replay us per Gluon sparse decode call, B64 H64 over a 32K context, top-2048, with and without the late-PDL
combine (launcher option `pdl`), alternating rounds so that both see the same clocks.

    PYTHONPATH=. python bench/sparse_mla_pdl_replay.py [--rounds 4] [--calls 50]
"""

from __future__ import annotations

import argparse

import torch

from bench import bench_sparse_mla as sparse_mla
from bench.common import captured_graph, median_ms
from bench.profile_missed_targets import sparse_mla_decode_inputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--calls", type=int, default=50, help="calls captured back to back in one graph")
    args = parser.parse_args()
    torch.manual_seed(0)
    with torch.inference_mode():
        for fmt in ("bf16", "fp8"):
            inputs = sparse_mla_decode_inputs(fmt, 64)
            graphs = {}
            for pdl in (False, True):
                call = lambda pdl=pdl, inputs=inputs: sparse_mla.sparse_mla_decode_gluon_launcher(  # noqa: E731
                    *inputs, sparse_mla.SM_SCALE, sparse_mla.NOPE, pdl=pdl)
                graphs[pdl] = captured_graph([call] * args.calls, warm=[call, call])
            for _ in range(args.rounds):
                row = {pdl: median_ms(graph.replay) * 1000 / args.calls for pdl, graph in graphs.items()}
                print(f"B64 H64 {fmt}: us a call, plain {row[False]:.2f}, pdl {row[True]:.2f}")


if __name__ == "__main__":
    main()
