"""Qwen3-Next at full width through the runtime: `dayzero bench --random-weights` on the qwen3-next-slice (3 gated
DeltaNet + 1 gated-attention layer, 512 experts top-10 + the gated shared expert, 7.21 B parameters in bf16), eager
engine (export layout) with CUDA-graph decode, bf16 caches. Prefill against the measured matmul rate; each decode step
against the least memory traffic it must move (dayzero/perf/decode_traffic.py) at the measured copy rate.

    python -m bench.bench_qwen3_next_slice [--out DIR] [--batch 1 16 64] [--prompt-tokens 512] [--output-tokens 32]
    python -m bench.bench_qwen3_next_slice --out /tmp/q --device cpu --layers 2 --experts 8 --batch 4 \\
        --prompt-tokens 70 --output-tokens 4                                   (a quick run of the script on a CPU)

--layers / --experts cut the slice down: gated DeltaNet layers, then one gated-attention layer.
"""

from __future__ import annotations

import json

from bench.slice_run import run_slice
from dayzero.paths import bundled_config


def slice_config(layers: int | None, experts: int | None) -> dict:
    data = json.loads(bundled_config("qwen3-next-slice").read_text())
    if layers is not None:
        data["num_hidden_layers"] = layers
        data["layer_types"] = ["linear_attention"] * (layers - 1) + ["full_attention"]
    if experts is not None:
        data["num_experts"] = experts
        data["num_experts_per_tok"] = min(data["num_experts_per_tok"], experts)
    return data


def describe(data: dict) -> str:
    return (f"qwen3-next-slice: {data['num_hidden_layers']} layers, {data['num_experts']} experts top-"
            f"{data['num_experts_per_tok']}, random bf16 weights")


if __name__ == "__main__":
    run_slice(__doc__, "qwen3_next_slice", "qwen3-next-slice", slice_config, describe)
