"""The export pipeline: checkpoint -> laid-out model -> traced steps -> per-rank engines in the compilation cache,
and `load_engine`, which turns a cache entry back into a StepEngine.

Entry layout: one folder per rank (tensor or context parallel), `rank{r}/`, holding the rank's `engine.json` (its
EngineManifest) and, for AOTInductor, `weights.safetensors` (the rank's laid-out weights, shared by its
packages) + `prefill.pt2` + `decode.pt2`; for ONNX (one rank), `decode.onnx` (the interchange graph, one custom
node per plugin op) with prefill served by the eager model.
An eager entry records the checkpoint instead of compiled code (loading rebuilds each rank's laid-out model).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

import torch

from dayzero.cache import CompilationCache, Entry, cache_key
from dayzero.contract import EngineManifest, StepEngine
from dayzero.errors import DayzeroError
from dayzero.export import fingerprint
from dayzero.export.aoti import AOTIEngine, compile_package
from dayzero.export.engine_weights import contiguous_weights_, program_weights, save_engine_weights
from dayzero.export.layout import lay_out
from dayzero.export.onnx import OnnxEngine, export_onnx
from dayzero.export.options import ExportOptions
from dayzero.export.rank_plan import RankPlan
from dayzero.export.replace import check_plugin_ops
from dayzero.export.split_engine import SplitEngine
from dayzero.export.trace import trace_step
from dayzero.logs import progress_bar
from dayzero.model.collectives import unordered_collectives
from dayzero.model.eager_engine import EagerEngine, eager_manifest
from dayzero.model.hybrid import HybridModel
from dayzero.model.zigzag import ContextPlan
from dayzero.parallel.mesh import MeshRank
from dayzero.parallel.world import compile_group
from dayzero.plugins.paged_cache.formats import latent_cache_shape

ENGINE_FILE = "engine.json"  # in each rank's folder
RANK_DIR = "rank0"  # rank 0's folder (the only one of a single-rank engine)
WEIGHTS_FILE = "weights.safetensors"
ONNX_FILE = "decode.onnx"
log = logging.getLogger(__name__)


class Progress:
    """One info line per stage (name, then seconds) and a bar counting the stages done (dayzero/logs.py)."""

    def __init__(self, echo: Callable[[str], None] | None = None):
        self.echo = echo or log.info
        self.seconds: dict[str, float] = {}
        self.bar = None

    def stage(self, name: str):
        progress = self

        class _Stage:
            def __enter__(self):
                self.start = time.perf_counter()
                progress.echo(f"[export] {name} ...")
                progress.show(name)

            def __exit__(self, *exc):
                progress.seconds[name] = time.perf_counter() - self.start
                if exc[0] is None:
                    progress.bar.update()
                    progress.echo(f"[export] {name} done in {progress.seconds[name]:.1f} s")

        return _Stage()

    def show(self, name: str) -> None:
        if self.bar is None:
            self.bar = progress_bar(desc="export", unit="step")
        self.bar.set_postfix_str(name)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def ingredients(checkpoint: Path, options: ExportOptions) -> dict:
    return {"config": fingerprint.config_fingerprint(checkpoint), "weights": fingerprint.weight_fingerprint(checkpoint),
            "options": dataclasses.asdict(options), "ranks": options.ranks, "world": options.world,
            "source": fingerprint.source_fingerprint(), "toolchain": fingerprint.toolchain(options.device)}


def _check_formats(model: HybridModel, options: ExportOptions) -> None:
    mla = model.config.mla
    if options.kv_cache == "fp8" and mla is not None:
        try:
            latent_cache_shape(1, mla.kv_lora_rank, mla.qk_rope_head_dim, True)
        except ValueError as err:
            raise DayzeroError(f"--kv-cache fp8 does not fit this model ({err}); use --kv-cache bf16") from err


def rank_dir(rank: int) -> str:
    return f"rank{rank}"


def load_rank_model(checkpoint: Path, options: ExportOptions, rank: int = 0) -> HybridModel:
    """The laid-out network one rank runs (the whole model on one rank), on the rank's device."""
    from dayzero.model import load

    mesh = MeshRank(options.tp, options.cp, rank)
    model = load(checkpoint, dtype=getattr(torch, options.dtype), device=options.rank_device(rank),
                 plan=RankPlan(options.tp, mesh.tp_rank, options.ep, mesh.tp_group),
                 keep_mxfp4=not options.dequantize_experts)
    if options.cp > 1:
        model.context_plan = ContextPlan(options.cp, mesh.cp_rank, mesh.cp_group)
    _check_formats(model, options)
    lay_out(model)
    return model.eval()


def _manifest(model: HybridModel, options: ExportOptions, rank: int) -> EngineManifest:
    manifest = eager_manifest(model, options.cache_format, options.max_batch, options.max_len, options.num_draft)
    extra = {"tp": options.tp, "cp": options.cp, "rank": rank}
    return dataclasses.replace(manifest, backend=options.backend, extra=extra)


def _check_collective_order(graph, step: str) -> None:
    unordered = unordered_collectives(graph)
    if unordered:
        raise DayzeroError(f"the {step} step has collectives that do not depend on each other ({unordered[:2]}); "
                           "compiled ranks could issue them in different orders and deadlock. This is a dayzero bug: "
                           "please report it with the model config")


def _build_aoti(model: HybridModel, manifest: EngineManifest, out: Path, progress: Progress) -> dict:
    contiguous_weights_(model)
    ops, weights = {}, {}
    for step, decode in (("prefill", False), ("decode", True)):
        with progress.stage(f"trace {step}"):
            program = trace_step(model, manifest, decode)
            ops[step] = check_plugin_ops(program, set())
            _check_collective_order(program.graph, step)
            weights.update(program_weights(program))
        with progress.stage(f"compile {step} (AOTInductor)"), compile_group():
            compile_package(program, out / f"{step}.pt2", manifest.device)
    with progress.stage("write weights"):
        save_engine_weights(weights, out / WEIGHTS_FILE)
    return {"plugin_ops": ops}


def _build_onnx(model: HybridModel, manifest: EngineManifest, out: Path, progress: Progress) -> dict:
    with progress.stage("trace + write the ONNX decode graph"):
        export_onnx(model, manifest, out / ONNX_FILE)
    return {}


BUILDERS: dict[str, Callable[[HybridModel, EngineManifest, Path, Progress], dict]] = {
    "eager": lambda *_: {}, "aoti": _build_aoti, "onnx": _build_onnx}


def _build_rank(checkpoint: Path, options: ExportOptions, rank: int, out: Path, progress: Progress) -> dict:
    prefix = f"rank {rank}: " if options.ranks > 1 else ""
    with progress.stage(f"{prefix}load + lay out weights"):
        model = load_rank_model(checkpoint, options, rank)
    manifest = _manifest(model, options, rank)
    folder = out / rank_dir(rank)
    folder.mkdir()
    (folder / ENGINE_FILE).write_text(json.dumps(manifest.to_json(), indent=1))
    return {"model": model.config.model_type, **BUILDERS[options.backend](model, manifest, folder, progress)}


def _builder(checkpoint: Path, options: ExportOptions, progress: Progress) -> Callable[[Path], dict]:
    def build(out: Path) -> dict:
        ranks = [_build_rank(checkpoint, options, rank, out, progress) for rank in range(options.ranks)]
        return {"backend": options.backend, "checkpoint": str(checkpoint.resolve()),
                "options": dataclasses.asdict(options), "stage_seconds": dict(progress.seconds), **ranks[0]}

    return build


def export_engine(checkpoint: str | Path, options: ExportOptions, cache: CompilationCache | None = None,
                  progress: Progress | None = None) -> tuple[Entry, bool]:
    """-> (the cache entry of this checkpoint + options, whether it was a cache hit)."""
    checkpoint = Path(checkpoint)
    if not (checkpoint / "config.json").is_file():
        raise DayzeroError(f"{checkpoint} is not a checkpoint directory (no config.json)")
    cache = cache or CompilationCache()
    progress = progress or Progress()
    recipe = ingredients(checkpoint, options)
    key = cache_key(recipe)
    built_at: list[float] = []

    def build_then_mark(out: Path) -> dict:
        meta = _builder(checkpoint, options, progress)(out)
        built_at.append(time.perf_counter())
        return meta

    try:
        entry = cache.get_or_build(key, build_then_mark, recipe)
    finally:
        progress.close()
    # no build ran: the entry was there (or a concurrent exporter finished it while this one waited)
    if not built_at:
        progress.echo(f"[export] cache hit {key[:16]} ({entry.path})")
        return entry, True
    progress.echo(f"[export] store (checksums, atomic rename) done in {time.perf_counter() - built_at[0]:.1f} s")
    return entry, False


def _load_eager(entry: Entry, manifest: EngineManifest, rank: int) -> StepEngine:
    options = ExportOptions(**entry.meta["options"])
    checkpoint = Path(entry.meta["checkpoint"])
    if not (checkpoint / "config.json").is_file():
        raise DayzeroError(f"the eager engine {entry.key[:16]} reads {checkpoint}, which is gone; export again")
    return EagerEngine(load_rank_model(checkpoint, options, rank), manifest)


def _load_aoti(entry: Entry, manifest: EngineManifest, rank: int) -> StepEngine:
    folder = f"{rank_dir(rank)}/"
    return AOTIEngine(manifest, entry.file(folder + WEIGHTS_FILE), entry.file(folder + "prefill.pt2"),
                      entry.file(folder + "decode.pt2"))


def _load_onnx(entry: Entry, manifest: EngineManifest, rank: int) -> StepEngine:
    return SplitEngine(manifest, prefill=_load_eager(entry, manifest, rank),
                       decode=OnnxEngine(entry.file(f"{rank_dir(rank)}/{ONNX_FILE}")))


ENGINE_LOADERS: dict[str, Callable[[Entry, EngineManifest, int], StepEngine]] = {
    "eager": _load_eager, "aoti": _load_aoti, "onnx": _load_onnx}


def load_engine(entry: Entry, rank: int = 0) -> StepEngine:
    """Rank `rank`'s engine of an entry (a multi-rank entry's engines run together: parallel/multi_rank_engine.py)."""
    manifest = EngineManifest.from_json(json.loads(entry.file(f"{rank_dir(rank)}/{ENGINE_FILE}").read_text()))
    return ENGINE_LOADERS[manifest.backend](entry, manifest, rank)
