"""The decode step as an ONNX interchange graph: one `dayzero`-domain node per plugin op, caches in and out.

The graph is what a TensorRT or ONNX Runtime deployment implements: standard ONNX for the dense math, and one
custom node per plugin op (KDA decode, cache writes, indexer Top-K, sparse MLA, AttnRes, MoE) whose contract
is the op's reference.py. Caches are functional here: every cache tensor of the manifest is a graph input
`cache.<layer>.<name>` and its updated value the graph output `cache.<layer>.<name>.new` (onnx_functional.py).

The program is trace.py's decode step, so batch, block-table width, page and slot counts are dynamic and the
tokens per sequence (1 + num_draft) fixed. `OnnxEngine` runs the file on ONNX Runtime (CPU) with the custom ops
of onnx_ort.py; it serves decode only (prefill stays with the eager or AOTInductor engine).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch

from dayzero.contract import EngineManifest, StepEngine, StepMeta
from dayzero.errors import DayzeroError
from dayzero.export.onnx_functional import caches_as_outputs, functional_translations, functionalize_plugin_ops
from dayzero.export.trace import META_FIELDS, trace_step
from dayzero.model.hybrid import HybridModel

OPSET = 18


def cache_names(manifest: EngineManifest) -> list[str]:
    return [f"cache.{t.layer}.{t.name}" for t in manifest.cache_tensors]


def export_onnx(model_or_engine, manifest: EngineManifest, path: str | Path) -> Path:
    """Write the decode graph of `model_or_engine` (a HybridModel or an engine with `.model`) to `path`, and its
    manifest (backend "onnx") to `<path>.manifest.json`; returns `path`."""
    model = model_or_engine if isinstance(model_or_engine, HybridModel) else getattr(model_or_engine, "model", None)
    if not isinstance(model, HybridModel):
        raise DayzeroError("export_onnx needs the reference model (a HybridModel or an EagerEngine around one)")
    program = _onnx_program(model.eval(), manifest)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    program.save(str(path))
    manifest_path(path).write_text(json.dumps(replace(manifest, backend="onnx").to_json(), indent=1))
    return path


def manifest_path(path: Path) -> Path:
    return path.with_name(path.name + ".manifest.json")


def _onnx_program(model: HybridModel, manifest: EngineManifest):
    import onnx

    ep = functionalize_plugin_ops(trace_step(model, manifest, decode=True))
    ep = caches_as_outputs(ep, len(manifest.cache_tensors))
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


class OnnxEngine(StepEngine):
    """The interchange graph on ONNX Runtime (CPU, custom nodes from onnx_ort.py) behind the engine contract.

    Decode only; the caches are updated in place from the graph's cache outputs (a copy per step).
    """

    def __init__(self, path: str | Path):
        from dayzero.export import onnx_ort

        self.path = Path(path)
        self.manifest = EngineManifest.from_json(json.loads(manifest_path(self.path).read_text()))
        self.session = onnx_ort.session(self.path)
        self._input_dtypes = {i.name: _NUMPY_DTYPES[i.type] for i in self.session.get_inputs()}

    def prefill(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> torch.Tensor:
        raise DayzeroError("the ONNX engine carries the decode graph only: run prefill on the eager or AOTInductor "
                           "engine over the same caches, then decode with this one")

    def decode(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> torch.Tensor:
        feeds = self._feeds(input_ids, meta, caches)
        logits, *new_caches = self.session.run(None, feeds)
        for cache, new in zip(caches, new_caches):
            cache.copy_(torch.from_numpy(new))
        return torch.from_numpy(logits)

    def _feeds(self, input_ids: torch.Tensor, meta: StepMeta, caches: list[torch.Tensor]) -> dict:
        names = ["input_ids", *META_FIELDS, *cache_names(self.manifest)]
        values = [input_ids, *(getattr(meta, f) for f in META_FIELDS), *caches]
        return {name: value.detach().cpu().numpy().astype(self._input_dtypes[name], copy=False)
                for name, value in zip(names, values)}


_NUMPY_DTYPES = {"tensor(float)": "float32", "tensor(int64)": "int64", "tensor(int32)": "int32",
                 "tensor(uint8)": "uint8", "tensor(float16)": "float16", "tensor(bool)": "bool"}
