"""The decode step as an ONNX interchange graph: one `dayzero`-domain node per plugin op, caches in and out.

The graph is what a TensorRT or ONNX Runtime deployment implements: standard ONNX for the dense math, and one
custom node per plugin op (KDA decode, cache writes, indexer Top-K, sparse MLA, AttnRes, MoE) whose contract
is the op's reference.py. Caches are functional here: every cache tensor of the manifest is a graph input
`cache.<layer>.<name>` and its updated value the graph output `cache.<layer>.<name>.new` (onnx_functional.py).

Shapes are those of the export: batch, tokens per sequence (1 + num_draft), block-table width, page and slot
counts are fixed and recorded in the manifest's `extra`. `OnnxEngine` runs the file on ONNX Runtime (CPU) with
the custom ops of onnx_ort.py; it serves decode only (prefill stays with the eager or AOTInductor engine).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import torch
from torch import nn

from dayzero.errors import DayzeroError
from dayzero.export.engine import EngineManifest, allocate_flat_caches, layer_caches
from dayzero.export.onnx_functional import functional_translations, functionalize_plugin_ops
from dayzero.model.hybrid import HybridModel
from dayzero.model.step import StepMeta, contiguous_meta

# the order in which torch.export flattens a StepMeta
META_FIELDS = tuple(f.name for f in fields(StepMeta))
OPSET = 18


@dataclass(frozen=True)
class DecodeShape:
    """The fixed shapes of one exported decode graph."""

    batch: int
    tokens_per_seq: int  # 1 + num_draft
    max_pages_per_seq: int  # block-table width
    num_pages: int
    num_slots: int

    @classmethod
    def for_manifest(cls, manifest: EngineManifest, num_pages: int | None = None,
                     num_slots: int | None = None) -> DecodeShape:
        width = 1 + manifest.num_draft
        pages_per_seq = math.ceil(manifest.max_len / manifest.page_size)
        return cls(manifest.max_batch, width, pages_per_seq, num_pages or manifest.max_batch * pages_per_seq,
                   num_slots or manifest.max_batch * width)


class DecodeStep(nn.Module):
    """decode over a flat cache list, returning the logits and the (updated) caches."""

    def __init__(self, model: HybridModel):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]):
        logits = self.model.decode(input_ids, meta, layer_caches(self.model, caches))
        return logits, caches


def example_decode_inputs(manifest: EngineManifest, shape: DecodeShape, device: str = "cpu"):
    """(input_ids, meta, caches) of the export's shapes: batch sequences of one page of context each."""
    batch, width = shape.batch, shape.tokens_per_seq
    meta = contiguous_meta([1] * batch, [width] * batch, shape.max_pages_per_seq, width, decode=True, device=device)
    input_ids = torch.zeros(batch, width, dtype=torch.long, device=device)
    return input_ids, meta, allocate_flat_caches(manifest, shape.num_pages, shape.num_slots, device)


def cache_names(manifest: EngineManifest) -> list[str]:
    return [f"cache.{t.layer}.{t.name}" for t in manifest.cache_tensors]


def export_onnx(model_or_engine, manifest: EngineManifest, path: str | Path, *, num_pages: int | None = None,
                num_slots: int | None = None) -> Path:
    """Write the decode graph of `model_or_engine` (a HybridModel or an engine with `.model`) to `path`, and its
    manifest (backend "onnx", shapes in `extra`) to `<path>.manifest.json`; returns `path`."""
    model = model_or_engine if isinstance(model_or_engine, HybridModel) else getattr(model_or_engine, "model", None)
    if not isinstance(model, HybridModel):
        raise DayzeroError("export_onnx needs the reference model (a HybridModel or an EagerEngine around one)")
    shape = DecodeShape.for_manifest(manifest, num_pages, num_slots)
    program = _onnx_program(model.eval(), manifest, shape)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    program.save(str(path))
    onnx_manifest = replace(manifest, backend="onnx", extra={**manifest.extra, "decode_shape": asdict(shape)})
    manifest_path(path).write_text(json.dumps(onnx_manifest.to_json(), indent=1))
    return path


def manifest_path(path: Path) -> Path:
    return path.with_name(path.name + ".manifest.json")


def _onnx_program(model: HybridModel, manifest: EngineManifest, shape: DecodeShape):
    import onnx

    with torch.no_grad():
        ep = torch.export.export(DecodeStep(model), example_decode_inputs(manifest, shape, str(model.device)))
    ep = functionalize_plugin_ops(ep)
    program = torch.onnx.export(ep, dynamo=True, custom_translation_table=functional_translations(),
                                opset_version=OPSET, optimize=False, verbose=False)
    _name_graph_values(program.model.graph, manifest)
    onnx.checker.check_model(program.model_proto, full_check=False)
    return program


def _name_graph_values(graph, manifest: EngineManifest) -> None:
    """Graph inputs input_ids, <meta field>..., cache.<l>.<name>...; outputs logits, cache.<l>.<name>.new..."""
    caches = cache_names(manifest)
    in_names = ["input_ids", *META_FIELDS, *caches]
    out_names = ["logits", *(f"{n}.new" for n in caches)]
    if len(graph.inputs) != len(in_names) or len(graph.outputs) != len(out_names):
        raise DayzeroError(f"the decode graph has {len(graph.inputs)} inputs / {len(graph.outputs)} outputs, the "
                           f"manifest describes {len(in_names)} / {len(out_names)}: export the manifest's model")
    for value, name in zip([*graph.inputs, *graph.outputs], [*in_names, *out_names]):
        value.name = name


class OnnxEngine:
    """The interchange graph on ONNX Runtime (CPU, custom nodes from onnx_ort.py) behind the engine contract.

    Decode only, at the exported shapes; the caches are updated in place from the graph's cache outputs.
    """

    def __init__(self, path: str | Path):
        from dayzero.export import onnx_ort

        self.path = Path(path)
        self.manifest = EngineManifest.from_json(json.loads(manifest_path(self.path).read_text()))
        self.shape = DecodeShape(**self.manifest.extra["decode_shape"])
        self.session = onnx_ort.session(self.path)
        self._input_dtypes = {i.name: _NUMPY_DTYPES[i.type] for i in self.session.get_inputs()}

    def prefill(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> torch.Tensor:
        raise DayzeroError("the ONNX engine carries the decode graph only: prefill with the eager or AOTInductor "
                           "engine (`dayzero export --backend aoti`), then decode with either")

    def decode(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> torch.Tensor:
        feeds = self._feeds(input_ids, meta, caches)
        logits, *new_caches = self.session.run(None, feeds)
        for cache, new in zip(caches, new_caches):
            cache.copy_(torch.from_numpy(new))
        return torch.from_numpy(logits)

    def _feeds(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> dict:
        names = ["input_ids", *META_FIELDS, *cache_names(self.manifest)]
        values = [input_ids, *(getattr(meta, f) for f in META_FIELDS), *caches]
        feeds = {}
        for name, value in zip(names, values):
            expected = self.session_shape(name)
            if tuple(value.shape) != expected:
                raise DayzeroError(f"ONNX decode input {name} has shape {tuple(value.shape)}, the graph was exported "
                                   f"for {expected} ({self.shape}): pad the batch or export for these shapes")
            feeds[name] = value.detach().cpu().numpy().astype(self._input_dtypes[name], copy=False)
        return feeds

    def session_shape(self, name: str) -> tuple[int, ...]:
        return tuple(next(i.shape for i in self.session.get_inputs() if i.name == name))


_NUMPY_DTYPES = {"tensor(float)": "float32", "tensor(int64)": "int64", "tensor(int32)": "int32",
                 "tensor(uint8)": "uint8", "tensor(float16)": "float16", "tensor(bool)": "bool"}
