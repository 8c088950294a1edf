"""GLM-5.3-Flash at full width through the runtime: `dayzero bench --random-weights` on the glm-5.3-flash-slice
(its first 8 layers: 6 KDA + 2 DSA-MLA with pooled index keys, 3 dense + 5 MoE with 288 experts top-8, 4
hyper-connection streams; 39.2 B parameters in bf16), eager engine (export layout) with CUDA-graph decode, bf16
caches. Prefill against the measured matmul rate; each decode step against the least memory traffic it must move
(dayzero/perf/decode_traffic.py) at the measured copy rate.

    python -m bench.bench_glm5_slice [--out DIR] [--batch 1 16 64] [--prompt-tokens 512] [--output-tokens 32]
    python -m bench.bench_glm5_slice --out /tmp/g --device cpu --layers 4 --experts 8 --batch 2 \\
        --prompt-tokens 70 --output-tokens 4                                   (a quick run of the script on a CPU)

--layers keeps the slice's first layers (the fourth is its first MLA layer); --experts cuts the routed experts.
"""

from __future__ import annotations

import json

from bench.slice_run import run_slice
from dayzero.paths import bundled_config

PER_LAYER = ("layer_types", "indexer_types", "mlp_layer_types")


def slice_config(layers: int | None, experts: int | None) -> dict:
    data = json.loads(bundled_config("glm-5.3-flash-slice").read_text())
    text = data["text_config"]
    if layers is not None:
        text["num_hidden_layers"] = layers
        for field in PER_LAYER:
            text[field] = text[field][:layers]
    if experts is not None:
        text["n_routed_experts"] = experts
        text["num_experts_per_tok"] = min(text["num_experts_per_tok"], experts)
    return data


def describe(data: dict) -> str:
    text = data["text_config"]
    return (f"glm-5.3-flash-slice: {text['num_hidden_layers']} layers, {text['n_routed_experts']} experts top-"
            f"{text['num_experts_per_tok']}, pools of {text['index_kpool']}, random bf16 weights")


if __name__ == "__main__":
    run_slice(__doc__, "glm5_slice", "glm-5.3-flash-slice", slice_config, describe)
