"""Qwen3-Next at full width through the runtime: `dayzero bench` on a random checkpoint of the qwen3-next-slice (3 gated
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
import tempfile
from pathlib import Path

import torch
from click.testing import CliRunner

from bench.common import parser, print_tables, write_result
from dayzero.cli import cli
from dayzero.model.checkpoint_writer import write_random_checkpoint
from dayzero.paths import bundled_config

COLUMNS = {"batch": "batch", "prefill tok/s": "prefill tok/s", "prefill TFLOP/s": "prefill TFLOP/s",
           "of matmul": "of matmul", "TTFT p50 ms": "TTFT p50 ms", "decode tok/s": "decode tok/s",
           "step ms": "step ms", "floor ms": "floor ms", "floor / step": "floor / step", "floor MB": "floor MB"}


def slice_config(layers: int | None, experts: int | None) -> dict:
    data = json.loads(bundled_config("qwen3-next-slice").read_text())
    if layers is not None:
        data["num_hidden_layers"] = layers
        data["layer_types"] = ["linear_attention"] * (layers - 1) + ["full_attention"]
    if experts is not None:
        data["num_experts"] = experts
        data["num_experts_per_tok"] = min(data["num_experts_per_tok"], experts)
    return data


def bench_rows(checkpoint: Path, args, json_path: Path) -> list[dict]:
    command = ["bench", str(checkpoint), "--device", args.device, "--dtype", "bfloat16",
               "--prompt-tokens", str(args.prompt_tokens), "--output-tokens", str(args.output_tokens),
               "--json", str(json_path), *(f"--batch={b}" for b in args.batch)]
    result = CliRunner().invoke(cli, command, catch_exceptions=False)
    print(result.output)
    if result.exit_code != 0:
        raise SystemExit(f"dayzero bench failed ({result.exit_code})")
    return json.loads(json_path.read_text())


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
    table = {"title": "qwen3-next-slice through the runtime (eager engine, CUDA-graph decode, bf16)", "rows": rows,
             "columns": COLUMNS, "plot": {"x": "batch", "y": ["floor / step"], "ylabel": "decode floor / step"}}
    ceilings = {"copy_GBps": round(measured["copy_bytes_per_s"] / 1e9, 1),
                "bf16_matmul_TFLOPs": round(measured["matmul_flops_per_s"] / 1e12, 2)}
    config = (f"qwen3-next-slice: {data['num_hidden_layers']} layers, {data['num_experts']} experts top-"
              f"{data['num_experts_per_tok']}, random bf16 weights")
    print_tables(write_result(args.out, "qwen3_next_slice", {"decode": table}, config=config, ceilings=ceilings,
                              engine=measured["engine"]))


if __name__ == "__main__":
    main()
