"""A model slice at full width through the runtime: `dayzero bench --random-weights` on a slice's config (random bf16
weights made in device memory, no checkpoint written: a 39 B-parameter slice would take minutes to write), its decode
rows written as one bench result (bench_qwen3_next_slice.py, bench_glm5_slice.py)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner

from bench.common import parser, print_tables, write_result
from dayzero.cli import cli

COLUMNS = {"batch": "batch", "prefill tok/s": "prefill tok/s", "prefill TFLOP/s": "prefill TFLOP/s",
           "of matmul": "of matmul", "TTFT p50 ms": "TTFT p50 ms", "decode tok/s": "decode tok/s",
           "step ms": "step ms", "floor ms": "floor ms", "floor / step": "floor / step", "floor MB": "floor MB"}


def slice_arguments(doc: str):
    """The command line every slice bench takes -> its parsed arguments."""
    p = parser(doc)
    p.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--output-tokens", type=int, default=32)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--experts", type=int, default=None)
    p.add_argument("--device", default="cuda")
    return p.parse_args()


def bench_rows(config_dir: Path, args, json_path: Path) -> dict:
    command = ["bench", str(config_dir), "--random-weights", "--device", args.device, "--dtype", "bfloat16",
               "--prompt-tokens", str(args.prompt_tokens), "--output-tokens", str(args.output_tokens),
               "--json", str(json_path), *(f"--batch={b}" for b in args.batch)]
    result = CliRunner().invoke(cli, command, catch_exceptions=False)
    print(result.output)
    if result.exit_code != 0:
        raise SystemExit(f"dayzero bench failed ({result.exit_code})")
    return json.loads(json_path.read_text())


def run_slice(doc: str, name: str, label: str, slice_config: Callable[[int | None, int | None], dict],
              describe: Callable[[dict], str]) -> None:
    """Parse the command line, write the slice's config (`label`: the bundled config it cuts), bench it and write
    `bench/results/<name>.json`."""
    args = slice_arguments(doc)
    data = slice_config(args.layers, args.experts)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(data))
        measured = bench_rows(Path(tmp), args, Path(tmp) / "rows.json")
    rows = [{key: row[key] for key in COLUMNS} for row in measured["rows"]]
    table = {"title": f"{label} through the runtime (eager engine, CUDA-graph decode, bf16)",
             "rows": rows, "columns": COLUMNS,
             "plot": {"x": "batch", "y": ["floor / step"], "ylabel": "decode floor / step"}}
    ceilings = {"copy_GBps": round(measured["copy_bytes_per_s"] / 1e9, 1),
                "bf16_matmul_TFLOPs": round(measured["matmul_flops_per_s"] / 1e12, 2)}
    print_tables(write_result(args.out, name, {"decode": table}, config=describe(data), ceilings=ceilings,
                              engine=measured["engine"]))
