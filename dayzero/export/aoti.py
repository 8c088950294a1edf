"""AOTInductor engines: one package per step function and rank, compiled with the plugin kernels in.

`compile_package` compiles an exported step into a .pt2 without its weights (engine_weights.py holds them once per
rank) and checks the generated wrapper for whole-cache copies (the caches are inputs that the plugin ops update in
place; a copy would cost a cache's bytes every step). `AOTIEngine` loads a rank's weights file and its prefill and
decode packages behind the StepEngine contract; both packages point at the same weight tensors. On CUDA it loads
them with `run_single_threaded=True`, which CUDA-graph capture of the loaded engine needs.
"""

from __future__ import annotations

import time
import zipfile
from pathlib import Path

import torch
from torch.export import ExportedProgram

from dayzero.contract import EngineManifest, StepEngine, StepMeta
from dayzero.errors import DayzeroError
from dayzero.export.engine_weights import load_engine_weights
from dayzero.export.inplace import copy_lines, whole_cache_writes, wrapper_cache_copies
from dayzero.export.replace import compile_target
from dayzero.export.trace import META_FIELDS, flat_inputs

# the step inputs before the caches: input_ids and the metadata
FIRST_CACHE = 1 + len(META_FIELDS)
INDUCTOR_CONFIGS = {
    # no kernel runs at compile time: the plugin kernels index caches by page tables and slots, which
    # Inductor's made-up autotuning inputs do not hold (an illegal address on the H200)
    "triton.autotune_at_compile_time": False,
    # the weights live in one file per rank, shared by its packages (engine_weights.py)
    "aot_inductor.package_constants_in_so": False,
}


def wrapper_sources(package: Path) -> dict[str, str]:
    with zipfile.ZipFile(package) as archive:
        return {name: archive.read(name).decode(errors="replace") for name in archive.namelist()
                if name.endswith(".wrapper.cpp")}


def whole_tensor_copies(package: Path) -> list[str]:
    """Lines of the generated wrapper code that copy a tensor (none are expected: caches are updated in place)."""
    return [line for source in wrapper_sources(package).values() for line in copy_lines(source)]


def _check_cache_writes(program: ExportedProgram, name: str, first_cache: int) -> None:
    writes = whole_cache_writes(program, first_cache)
    if writes:
        raise DayzeroError(f"the {name} step writes whole caches ({writes[:3]}), not just its rows; this is a "
                           "dayzero bug: please report it with the model config")


def compile_package(program: ExportedProgram, path: Path, device: str, first_cache: int = FIRST_CACHE) -> Path:
    """Compile a step whose inputs from `first_cache` on are caches; refuse whole-cache writes or copies."""
    _check_cache_writes(program, path.stem, first_cache)
    with compile_target(device):
        torch._inductor.aoti_compile_and_package(program, package_path=str(path), inductor_configs=INDUCTOR_CONFIGS)
    sources = wrapper_sources(path)
    if not sources:
        raise DayzeroError(f"AOTInductor wrote no wrapper code into {path}; the export failed")
    copies = [line for source in sources.values()
              for line in (*copy_lines(source), *wrapper_cache_copies(source, first_cache))]
    if copies:
        raise DayzeroError(f"the compiled engine {path.name} copies tensors every step ({copies[:3]}); this is a "
                           "dayzero bug: please report it with the model config")
    return path


def load_package(path: Path, device: str, weights: dict[str, torch.Tensor]):
    """A compiled step whose constants point at `weights` (no copy: the caller keeps them alive)."""
    cuda = torch.device(device).type == "cuda"
    runner = torch._inductor.aoti_load_package(str(path), run_single_threaded=cuda)
    wanted = runner.get_constant_fqns()
    missing = [name for name in wanted if name not in weights]
    if missing:
        raise DayzeroError(f"the engine weights lack {len(missing)} tensors that {path.name} needs ({missing[:3]}); "
                           "the cache entry is damaged: run `dayzero cache verify` and export again")
    runner.load_constants({name: weights[name] for name in wanted}, check_full_update=True, user_managed=True)
    return runner


class AOTIEngine(StepEngine):
    """A rank's compiled steps; a step whose package is not given (None) cannot be called."""

    def __init__(self, manifest: EngineManifest, weights: Path, prefill_package: Path | None,
                 decode_package: Path | None):
        self.manifest = manifest
        start = time.perf_counter()
        self.weights = load_engine_weights(weights, manifest.device)
        self.load_seconds = {"weights": time.perf_counter() - start}
        self._steps = {}
        for step, package in (("prefill", prefill_package), ("decode", decode_package)):
            if package is not None:
                start = time.perf_counter()
                self._steps[step] = load_package(package, manifest.device, self.weights)
                self.load_seconds[step] = time.perf_counter() - start

    def _run(self, step: str, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> torch.Tensor:
        if step not in self._steps:
            raise DayzeroError(f"this engine has no compiled {step} step")
        return self._steps[step](*flat_inputs(input_ids, meta, caches))

    def prefill(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> torch.Tensor:
        return self._run("prefill", input_ids, meta, caches)

    def decode(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> torch.Tensor:
        return self._run("decode", input_ids, meta, caches)
