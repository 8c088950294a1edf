"""The laid-out weights of one rank, stored once beside its compiled packages and shared by them at load time.

AOTInductor packages are compiled without their constants (`aot_inductor.package_constants_in_so=False`): the
prefill and decode packages of a rank would otherwise each embed a full copy of the weights (two copies on the
GPU, and every package as large as the model). Instead the export writes the exported program's state dict to
`weights.safetensors`, keyed by the names AOTInductor gives its constants, and the engine loads that file once
and hands the same tensors to every package (`user_managed`: the packages keep pointers, no copy).

Tensors that share storage (tied embeddings) are written once; the others name it in the file's metadata.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from dayzero.errors import DayzeroError

_ALIASES = "dayzero_aliases"


def program_weights(program: torch.export.ExportedProgram) -> dict[str, torch.Tensor]:
    """Everything a compiled package of `program` may ask for by name: parameters, buffers, lifted constants."""
    return {**program.state_dict, **{name: t for name, t in program.constants.items()
                                     if isinstance(t, torch.Tensor)}}


def _storage_key(tensor: torch.Tensor) -> tuple:
    return tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tuple(tensor.stride())


def save_engine_weights(weights: dict[str, torch.Tensor], path: Path) -> Path:
    """Write `weights` to a safetensors file (contiguous tensors only: compiled code assumes their strides)."""
    unique: dict[tuple, str] = {}
    tensors, aliases = {}, {}
    for name, tensor in weights.items():
        if not tensor.is_contiguous():
            raise DayzeroError(f"weight {name} is not contiguous; this is a dayzero bug (the export lays out "
                               "contiguous weights): please report it with the model config")
        key = _storage_key(tensor)
        if key in unique:
            aliases[name] = unique[key]
            continue
        unique[key] = name
        tensors[name] = tensor.detach().cpu()
    save_file(tensors, str(path), metadata={_ALIASES: json.dumps(aliases)})
    return path


def load_engine_weights(path: Path, device: str) -> dict[str, torch.Tensor]:
    try:
        with safe_open(str(path), framework="pt", device=str(device)) as f:
            tensors = {name: f.get_tensor(name) for name in f.keys()}
            aliases = json.loads((f.metadata() or {}).get(_ALIASES, "{}"))
    except (SafetensorError, OSError, ValueError) as err:
        raise DayzeroError(f"cannot read the engine weights {path} ({err}); run `dayzero cache verify` and "
                           "export again") from err
    return {**tensors, **{name: tensors[target] for name, target in aliases.items()}}


def contiguous_weights_(module: torch.nn.Module) -> None:
    """Make every parameter and buffer of `module` contiguous in place (before tracing, so that the compiled
    code and the weights file agree on strides); tied tensors stay tied."""
    for sub in module.modules():
        for store in (sub._parameters, sub._buffers):
            for name, tensor in store.items():
                if tensor is not None and not tensor.is_contiguous():
                    store[name].data = tensor.data.contiguous()
