"""`dayzero export CKPT [options]`: build (or find in the cache) the engines of a checkpoint."""

from __future__ import annotations

import time
from pathlib import Path

import click

from dayzero.export.options import BACKENDS, DTYPES, INDEX_CACHES, KV_CACHES, ExportOptions
from dayzero.model.expert_format import DEQUANTIZE_EXPERTS_HELP


@click.command("export")
@click.argument("checkpoint", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--backend", type=click.Choice(BACKENDS), default="aoti", show_default=True)
@click.option("--kv-cache", type=click.Choice(KV_CACHES), default="bf16", show_default=True,
              help="Latent KV cache: FP8 per-128 tiles (656 B/token) or unquantized in the model dtype.")
@click.option("--index-cache", type=click.Choice(INDEX_CACHES), default="bf16", show_default=True,
              help="Indexer key cache: MXFP8 (132 B/token) or unquantized in the model dtype.")
@click.option("--max-batch", type=int, default=16, show_default=True)
@click.option("--max-len", type=int, default=None, help="Longest sequence (default: the model's context).")
@click.option("--num-draft", type=int, default=0, show_default=True, help="Draft tokens verified per decode step.")
@click.option("--tp", type=int, default=1, show_default=True)
@click.option("--cp", type=int, default=1, show_default=True)
@click.option("--ep", type=int, default=1, show_default=True)
@click.option("--device", default="auto", show_default=True, help="cpu, cuda, cuda:N; auto: the GPU when torch sees "
              "one, else the CPU.")
@click.option("--dtype", type=click.Choice(["auto", *DTYPES]), default="auto", show_default=True,
              help="auto: the checkpoint's torch_dtype (float32 where config.json names none).")
@click.option("--dequantize-experts", is_flag=True, help=DEQUANTIZE_EXPERTS_HELP)
def export(checkpoint: Path, **options) -> None:
    """Trace, lay out and compile CHECKPOINT's step functions into engines stored in the compilation cache."""
    from dayzero.export.auto_options import checkpoint_dtype, default_device
    from dayzero.export.build import export_engine

    if options["device"] == "auto":
        options["device"] = default_device()
    if options["dtype"] == "auto":
        options["dtype"] = checkpoint_dtype(checkpoint)
    start = time.perf_counter()
    entry, hit = export_engine(checkpoint, ExportOptions(**options))
    click.echo(f"{'cache hit' if hit else 'built'} {entry.key[:16]} in {time.perf_counter() - start:.1f} s: "
               f"{entry.path} ({entry.size / 2**20:.1f} MB)")
