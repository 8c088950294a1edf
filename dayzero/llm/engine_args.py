"""vLLM's `LLM(...)` keyword arguments mapped onto dayzero's ExportOptions (what the engine is built as) and
RuntimeOptions (how it is run), and the vLLM arguments dayzero refuses, each with what to do instead.

An argument left out (None) keeps the value of the `export=` / `runtime=` options given, else dayzero's default:
the eager backend, on the GPU when torch sees one (else the CPU), in the checkpoint's dtype.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from dayzero.errors import DayzeroError
from dayzero.export.auto_options import checkpoint_dtype, default_device, dtype_name
from dayzero.export.options import KV_CACHES, ExportOptions
from dayzero.runtime.llm_engine import RuntimeOptions

# vLLM's kv_cache_dtype -> dayzero's latent-cache format ("auto": unquantized, in the model's dtype; dayzero's FP8
# cache holds e4m3)
KV_CACHE_NAMES = {"auto": "bf16", "fp8": "fp8", "fp8_e4m3": "fp8", **{name: name for name in KV_CACHES}}

# vLLM argument -> (ExportOptions field, its value from the argument's)
EXPORT_ARGS: dict[str, tuple[str, Callable]] = {
    "tensor_parallel_size": ("tp", int),
    "max_model_len": ("max_len", int),
    "max_num_seqs": ("max_batch", int),
    "device": ("device", str),
}
# vLLM argument -> (RuntimeOptions field, its value from the argument's)
RUNTIME_ARGS: dict[str, tuple[str, Callable]] = {
    "gpu_memory_utilization": ("gpu_memory_fraction", float),
    # vLLM's enforce_eager turns CUDA graphs off; dayzero's compiled engines come from export=ExportOptions(backend=)
    "enforce_eager": ("cuda_graphs", lambda eager: not eager),
    "enable_prefix_caching": ("prefix_caching", bool),
    "max_num_batched_tokens": ("token_budget", int),
    # vLLM's async scheduling: the next step is scheduled while the device runs the current one
    "async_scheduling": ("overlap", bool),
}

# vLLM arguments dayzero does not implement -> (the value that asks for nothing, what to do instead)
REFUSED: dict[str, tuple[object, str]] = {
    "pipeline_parallel_size": (1, "dayzero has no pipeline stages: split the model over GPUs with "
                                  "tensor_parallel_size (and context parallelism, export=ExportOptions(cp=N))"),
    "data_parallel_size": (1, "run one LLM (or one `dayzero serve`) per group of GPUs"),
    "quantization": (None, "dayzero runs the checkpoint's own weights (MXFP4 experts included); for a smaller cache "
                           "use kv_cache_dtype=\"fp8\""),
    "speculative_config": (None, "dayzero drafts by prompt lookup: export=ExportOptions(num_draft=K)"),
    "enable_lora": (False, "dayzero serves no LoRA adapters; merge the adapter into the checkpoint"),
    "cpu_offload_gb": (0, "dayzero keeps the weights on the device; use tensor_parallel_size to spread them"),
    "revision": (None, "dayzero reads a local checkpoint folder: download the revision first and pass its path"),
    "tokenizer_revision": (None, "dayzero reads a local tokenizer folder: download it first and pass its path"),
    "download_dir": (None, "dayzero reads a local checkpoint folder: download it first and pass its path"),
    "tokenizer_mode": ("auto", "dayzero loads the checkpoint's tokenizer.json or tiktoken.model"),
    "block_size": (None, "dayzero's cache page size is fixed by the engine contract"),
    "hf_overrides": (None, "edit the checkpoint's config.json (dayzero reads it as it is)"),
    "kv_transfer_config": (None, "dayzero has no disaggregated prefill"),
}
# vLLM arguments that change nothing in dayzero, accepted with any value: dayzero runs no code from a checkpoint,
# keeps no statistics log, and recomputes a preempted sequence instead of swapping it to CPU memory
IGNORED = frozenset({"trust_remote_code", "disable_log_stats", "swap_space"})


def refuse_unsupported(kwargs: dict) -> None:
    """Raise for any keyword argument that is neither dayzero's nor vLLM's, or that asks for what dayzero lacks."""
    unknown = sorted(name for name in kwargs if name not in REFUSED and name not in IGNORED)
    if unknown:
        raise DayzeroError(f"LLM() got unknown keyword arguments: {', '.join(unknown)}; dayzero takes vLLM's "
                           f"{', '.join(['model', 'tokenizer', 'dtype', 'seed', *EXPORT_ARGS, *RUNTIME_ARGS])}"
                           ", kv_cache_dtype and generation_config, and its own export=, runtime=, engine=")
    for name, value in kwargs.items():
        if name in REFUSED and value != REFUSED[name][0]:
            raise DayzeroError(f"LLM({name}={value!r}) is not supported: {REFUSED[name][1]}")


def export_options(checkpoint: Path, export: ExportOptions | None, args: dict) -> ExportOptions:
    """args: vLLM's arguments by name (None: not given). dtype "auto": the checkpoint's."""
    base = export or ExportOptions(backend="eager", device=default_device(), dtype=checkpoint_dtype(checkpoint))
    fields = _given(EXPORT_ARGS, args)
    dtype = args.get("dtype")
    if dtype is not None:
        fields["dtype"] = checkpoint_dtype(checkpoint) if dtype == "auto" else dtype_name(dtype, "dtype")
    cache = args.get("kv_cache_dtype")
    if cache is not None:
        if cache not in KV_CACHE_NAMES:
            raise DayzeroError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_NAMES)}, got {cache!r}")
        fields["kv_cache"] = KV_CACHE_NAMES[cache]
    return dataclasses.replace(base, **fields)


def runtime_options(runtime: RuntimeOptions | None, args: dict) -> RuntimeOptions:
    """args: vLLM's arguments by name (None: not given)."""
    return dataclasses.replace(runtime or RuntimeOptions(), **_given(RUNTIME_ARGS, args))


def _given(table: dict[str, tuple[str, Callable]], args: dict) -> dict:
    """The options fields of the arguments given (not None) in a table."""
    return {field: convert(args[name]) for name, (field, convert) in table.items() if args.get(name) is not None}
