"""GLM-5.3-Flash at full width through the runtime: `dayzero bench` on a random checkpoint of the glm-5.3-flash-slice
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
import tempfile
from pathlib import Path

import torch

from bench.bench_qwen3_next_slice import COLUMNS, bench_rows
from bench.common import parser, print_tables, write_result
from dayzero.model.checkpoint_writer import write_random_checkpoint
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


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--output-tokens", type=int, default=32)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--experts", type=int, default=None)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    data = slice_config(args.layers, args.experts)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(data))
        checkpoint = write_random_checkpoint(Path(tmp) / "config.json", Path(tmp) / "ckpt", torch.bfloat16)
        measured = bench_rows(checkpoint, args, Path(tmp) / "rows.json")
    rows = [{key: row[key] for key in COLUMNS} for row in measured["rows"]]
    table = {"title": "glm-5.3-flash-slice through the runtime (eager engine, CUDA-graph decode, bf16)", "rows": rows,
             "columns": COLUMNS, "plot": {"x": "batch", "y": ["floor / step"], "ylabel": "decode floor / step"}}
    ceilings = {"copy_GBps": round(measured["copy_bytes_per_s"] / 1e9, 1),
                "bf16_matmul_TFLOPs": round(measured["matmul_flops_per_s"] / 1e12, 2)}
    text = data["text_config"]
    config = (f"glm-5.3-flash-slice: {text['num_hidden_layers']} layers, {text['n_routed_experts']} experts top-"
              f"{text['num_experts_per_tok']}, pools of {text['index_kpool']}, random bf16 weights")
    print_tables(write_result(args.out, "glm5_slice", {"decode": table}, config=config, ceilings=ceilings,
                              engine=measured["engine"]))


if __name__ == "__main__":
    main()
