"""What an export builds: the frozen options behind `dayzero export` (one field per CLI option)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dayzero.errors import DayzeroError
from dayzero.export.rank_plan import check_expert_split
from dayzero.model.caches import CacheFormat
from dayzero.plugins.kda.limits import MAX_STEP_TOKENS

BACKENDS = ("aoti", "onnx", "eager")
KV_CACHES = ("bf16", "fp8")
INDEX_CACHES = ("bf16", "mxfp8")
DTYPES = ("bfloat16", "float32", "float16")


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise DayzeroError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


@dataclass(frozen=True)
class ExportOptions:
    backend: str = "aoti"
    # bf16 = unquantized, in the model's dtype
    kv_cache: str = "bf16"
    index_cache: str = "bf16"
    max_batch: int = 16
    max_len: int | None = None  # default: the model's max_position_embeddings
    num_draft: int = 0
    tp: int = 1
    cp: int = 1
    ep: int = 1
    device: str = "cpu"
    dtype: str = "float32"
    # routed experts stored as MXFP4 are held packed (model/expert_format.py) unless this is set
    dequantize_experts: bool = False

    def __post_init__(self):
        _choice("backend", self.backend, BACKENDS)
        _choice("kv_cache", self.kv_cache, KV_CACHES)
        _choice("index_cache", self.index_cache, INDEX_CACHES)
        _choice("dtype", self.dtype, DTYPES)
        for name in ("max_batch", "tp", "cp", "ep"):
            if getattr(self, name) < 1:
                raise DayzeroError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_draft < 0 or (self.max_len is not None and self.max_len < 1):
            raise DayzeroError("num_draft must be >= 0 and max_len >= 1")
        if 1 + self.num_draft > MAX_STEP_TOKENS:
            raise DayzeroError(f"num_draft must be <= {MAX_STEP_TOKENS - 1} (the KDA decode kernels step through at "
                               f"most {MAX_STEP_TOKENS} tokens a sequence), got {self.num_draft}")
        if self.cp > 1 and self.backend != "eager":
            # a rank's share of a step depends on the step's sequence lengths, which a traced graph cannot branch on
            raise DayzeroError("context-parallel ranks run the eager engine; export --cp with --backend eager")
        check_expert_split(self.ep, self.tp)
        if self.tp > 1 and self.backend == "onnx":
            raise DayzeroError("the ONNX interchange graph is single-rank; export it with --tp 1")
        if self.tp > 1 and self.backend == "aoti" and torch.device(self.device).type == "cpu":
            # seen on torch 2.13: the compiled step holds the GIL while it waits on an all-reduce, and gloo's worker
            # thread needs the GIL to free an earlier collective's buffers before it runs the next one
            raise DayzeroError("compiled tensor-parallel engines need GPUs (NCCL); on CPUs (gloo) a compiled step "
                               "deadlocks waiting on its all-reduce. Use --backend eager for CPU ranks")

    @property
    def cache_format(self) -> CacheFormat:
        return CacheFormat(kv_fp8=self.kv_cache == "fp8", index_mxfp8=self.index_cache == "mxfp8")

    @property
    def ranks(self) -> int:
        """Processes (and GPUs) the engine runs on."""
        return self.tp * self.cp

    def rank_device(self, rank: int) -> str:
        """Rank r of a multi-GPU engine runs on GPU r of the host."""
        device = torch.device(self.device)
        if self.ranks == 1 or device.type != "cuda":
            return self.device
        return f"cuda:{(device.index or 0) + rank}"

    @property
    def world(self) -> dict:
        return {"tp": self.tp, "cp": self.cp, "ep": self.ep}
