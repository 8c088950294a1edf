"""Loading a HF checkpoint into the network (docs/models.md, "Checkpoint loading").

The adapter of the config's `model_type` (adapters/) says which stored tensors hold each parameter: renamed, one per
routed expert (stacked into `experts.w1 [E, I, D]`; possibly MXFP4 `weight_packed` + `weight_scale`, K3's release
format, which the network then holds packed, model/expert_format.py, or dequantized) or a slice of a fused tensor.
`A_log` is stored [1, 1, H, 1] (Kimi-Linear), [H], or zero-padded to a multiple of 128 (K3). Stored tensors no
parameter asks for (multi-token-prediction layers, ...) are not read.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import torch

from dayzero.errors import DayzeroError
from dayzero.logs import progress_bar
from dayzero.model.adapters import adapter_for
from dayzero.model.adapters.base import EXPERT_PARAM, TensorPart
from dayzero.model.checkpoint import CheckpointReader
from dayzero.model.config import ModelConfig
from dayzero.model.expert_format import with_expert_format
from dayzero.model.hybrid import HybridModel


class Sharding(Protocol):
    """The part of the network one tensor-parallel rank holds (the exporter's rank plan, export/rank_plan.py)."""

    tp: int

    def local_config(self, cfg: ModelConfig) -> ModelConfig: ...

    def shard(self, full: torch.Tensor, local_shape: torch.Size, segments: tuple[int, ...] = ()) -> torch.Tensor: ...

    def first_expert(self, local_experts: int) -> int: ...

    def mark_reductions(self, model: torch.nn.Module) -> None: ...


log = logging.getLogger(__name__)
# kept in fp32 whatever the model dtype: tiny, and the gates and router are precision-sensitive
FP32_PARAMS = re.compile(r"(\.A_log|\.dt_bias|\.gate\.weight|\.gate\.e_score_correction_bias|_hc\.base|_hc\.scale)$")


def parameter_parts(name: str, shape: tuple[int, ...], cfg: ModelConfig) -> list[TensorPart]:
    """The stored tensors of parameter `name`, in stacking order (the adapter of cfg's model_type)."""
    return adapter_for(cfg.model_type).tensor_parts(name, shape)


def checkpoint_reader(path: str | Path, cfg: ModelConfig) -> CheckpointReader:
    """The checkpoint at `path`, its names laid out as the adapter of cfg's model_type expects."""
    return CheckpointReader(path, adapter_for(cfg.model_type).layouts)


def parameter_shapes(cfg: ModelConfig) -> dict[str, torch.Size]:
    """Every parameter's shape, from a network built on the meta device (nothing allocated)."""
    with torch.device("meta"):
        return {name: p.shape for name, p in HybridModel(cfg).named_parameters()}


def refuse_oversized(reader: CheckpointReader, cfg: ModelConfig) -> None:
    """Refuse a config describing more parameters than the checkpoint's files can hold (half a byte each at the
    least, MXFP4), before anything is allocated."""
    num_params = sum(shape.numel() for shape in parameter_shapes(cfg).values())
    stored = reader.stored_bytes()
    if num_params > 2 * stored:
        raise DayzeroError(f"config.json in {reader.directory} describes {num_params:,} parameters, but its "
                           f"safetensors files hold {stored:,} bytes; config.json does not match these weights")


def param_dtype(name: str, dtype: torch.dtype) -> torch.dtype:
    expert = EXPERT_PARAM.match(name)
    if expert and expert["mxfp4"]:
        return torch.uint8
    return torch.float32 if FP32_PARAMS.search(name) else dtype


def build_empty(cfg: ModelConfig, dtype: torch.dtype, device: torch.device | str) -> HybridModel:
    """The network with uninitialized storage on `device` (no time spent on throwaway init)."""
    with torch.device("meta"):
        model = HybridModel(cfg)
    # the dtypes are set while the storage is still meta: the device never holds an fp32 copy of a bf16 model
    for name, param in model.named_parameters():
        param.data = param.data.to(param_dtype(name, dtype))
    model.to_empty(device=device)
    return model.eval()


def _fit_a_log(tensor: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor | None:
    heads = shape[0]
    if tensor.numel() == heads:
        return tensor.reshape(shape)
    if tensor.dim() == 1 and tensor.numel() > heads and tensor.numel() % 128 == 0:
        return tensor[:heads]
    return None


def _read_part(reader: CheckpointReader, part: TensorPart, param_name: str) -> torch.Tensor:
    source = next((s for s in part.sources if reader.has(s.name) or reader.has_mxfp4(s.name)), None)
    if source is None:
        raise DayzeroError(
            f"checkpoint {reader.directory} is missing tensor {reader.stored(part.names[0])!r} (needed for "
            f"{param_name}); the download may be incomplete, or config.json does not match these weights")
    if source.index and reader.shape(source.name) != source.whole:
        raise DayzeroError(
            f"tensor {reader.stored(source.name)!r} in {reader.directory} has shape "
            f"{list(reader.shape(source.name))}, but config.json implies {list(source.whole)}; config.json does not "
            "match these weights")
    tensor = reader.get(source.name, source.index)
    _refuse_bad_values(reader, source.name, tensor, param_dtype(param_name, torch.float32).is_floating_point)
    fitted = _fit_a_log(tensor, part.shape) if source.name.endswith("A_log") else tensor
    if fitted is None or tuple(fitted.shape) != part.shape:
        raise DayzeroError(
            f"tensor {reader.stored(source.name)!r} in {reader.directory} has shape {list(tensor.shape)}, but "
            f"config.json implies {list(part.shape)}; config.json does not match these weights")
    return fitted


def _refuse_bad_values(reader: CheckpointReader, name: str, tensor: torch.Tensor, expect_float: bool) -> None:
    """A float parameter stored as integers, or holding NaN / inf, is a broken checkpoint: refused by name. One
    fp32-accumulated sum a tensor as it is read finds both (NaN and inf propagate; finite weights cannot overflow
    it), at 2x (bf16) to 20x (fp32) the speed of `isfinite(t).all()` on the CPU."""
    where = f"tensor {reader.stored(name)!r} in {reader.directory}"
    if expect_float != tensor.dtype.is_floating_point:
        wanted = "a float type" if expect_float else "packed MXFP4 bytes (uint8)"
        raise DayzeroError(f"{where} is stored as {tensor.dtype}, but the model expects {wanted}; the checkpoint is "
                           "corrupt or of another format, re-export it")
    if not expect_float:
        return
    # fp8 has no sum of its own
    wide = tensor if tensor.itemsize > 1 else tensor.float()
    if not torch.isfinite(wide.sum(dtype=torch.float32)):
        raise DayzeroError(f"{where} holds NaN or inf values; the checkpoint is corrupt, re-download or re-export it")


def _load_parameter(reader: CheckpointReader, name: str, param: torch.Tensor, cfg: ModelConfig) -> None:
    if name == "lm_head.weight" and cfg.tie_word_embeddings and not reader.has(name):
        name_in_ckpt = "model.embed_tokens.weight"
        param.copy_(_read_part(reader, TensorPart((name_in_ckpt,), tuple(param.shape)), name))
        return
    parts = parameter_parts(name, tuple(param.shape), cfg)
    if len(parts) == 1 and parts[0].shape == tuple(param.shape):
        param.copy_(_read_part(reader, parts[0], name))
        return
    for index, part in enumerate(parts):
        param[index].copy_(_read_part(reader, part, name))


def _loading(model: HybridModel) -> Iterator[tuple[str, torch.nn.Parameter]]:
    """The parameters to fill, counted on a progress bar (dayzero/logs.py)."""
    params = list(model.named_parameters())
    with progress_bar(params, desc="loading weights", unit="param") as bar:
        for name, param in bar:
            bar.set_postfix_str(name, refresh=False)
            yield name, param


@torch.no_grad()
def load(path: str | Path, dtype: torch.dtype = torch.bfloat16, device: torch.device | str = "cpu",
         plan: Sharding | None = None, keep_mxfp4: bool = True) -> HybridModel:
    """Load a HF-format checkpoint directory (config.json + *.safetensors) into the reference network, or into the
    part of it that one tensor-parallel rank runs. Routed experts stored as MXFP4 stay packed unless `keep_mxfp4`
    is off (model/expert_format.py)."""
    cfg = ModelConfig.from_hf(path)
    reader = checkpoint_reader(path, cfg)
    cfg = with_expert_format(cfg, reader, keep_mxfp4)
    refuse_oversized(reader, cfg)
    for part in cfg.ignored_parts:
        log.info("%s: %s", path, part)
    if cfg.num_mtp_layers:
        log.info("%s: the checkpoint's %d multi-token-prediction layer(s) after layer %d are not loaded (dayzero "
                 "drafts from n-grams)", path, cfg.num_mtp_layers, cfg.num_layers - 1)
    if plan is None or plan.tp == 1:
        model = build_empty(cfg, dtype, device)
        for name, param in _loading(model):
            _load_parameter(reader, name, param, cfg)
        return model
    model = build_empty(plan.local_config(cfg), dtype, device)
    full_shapes = parameter_shapes(cfg)
    for name, param in _loading(model):
        owner = model.get_submodule(name.rpartition(".")[0])
        _load_shard(reader, name, param, full_shapes[name], cfg, plan, getattr(owner, "segments", ()))
    plan.mark_reductions(model)
    return model


def _load_shard(reader: CheckpointReader, name: str, param: torch.Tensor, full_shape: torch.Size, cfg: ModelConfig,
                plan: Sharding, segments: tuple[int, ...] = ()) -> None:
    """This rank's part of one parameter (`segments`: the local sizes of the row groups it holds side by side, each
    sharded on its own). Host memory holds one whole stored tensor at a time: one expert of a stacked bank, never the
    bank (a K3.1 bank is tens of GB)."""
    if EXPERT_PARAM.match(name) is None:
        whole = torch.empty(full_shape, dtype=param.dtype)
        _load_parameter(reader, name, whole, cfg)
        param.copy_(plan.shard(whole, param.shape, segments))
        return
    parts = parameter_parts(name, tuple(full_shape), cfg)
    first = plan.first_expert(param.shape[0])
    for index in range(param.shape[0]):
        param[index].copy_(plan.shard(_read_part(reader, parts[first + index], name), param[index].shape))
