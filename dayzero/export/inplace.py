"""The check that an engine updates its caches in place, writing only the rows a step touches.

The caches are the step's inputs after input_ids and the metadata (trace.py). Two views of the same rule:

* the exported graph (device independent): every write into a cache, through any view of it, must be a plugin op
  (`torch.ops.dayzero.*`, which writes the rows of slot_mapping / state_slots) or a row scatter (index_copy_,
  index_put_, scatter_: the KDA prefill's final states), never a whole-tensor op (copy_, a pointwise in-place op);
* the generated C++ wrapper of an AOTInductor package, which binds input i as `auto argN_1 =
  std::move(inputs[i]);`: no explicit tensor copy or clone may take a cache.
Either would cost a whole cache's bytes every step.
"""

from __future__ import annotations

import re

import torch
from torch.export import ExportedProgram

ROW_SCATTERS = ("aten.index_copy_", "aten.index_put_", "aten.scatter_")
_BINDING = re.compile(r"auto (arg\d+_1) = std::move\(inputs\[(\d+)\]\);")
_COPY_CALLS = re.compile(r"aoti_torch_copy_|aoti_torch_clone|\.copy_\(|at::copy")
# Inductor's guard on GPU inputs it compiled as 16-byte aligned: a clone only when the pointer is misaligned at run
# time. Caches are whole fresh allocations (allocate_flat_caches, which the runtime uses), so it never fires for them.
_ALIGNMENT_GUARD = re.compile(r"aoti_torch_clone_preserve_strides\((\w+), &\1_aligned\)")


def copy_lines(source: str) -> list[str]:
    """Lines of generated wrapper code that copy or clone a tensor (alignment guards aside)."""
    return [line.strip() for line in source.splitlines()
            if _COPY_CALLS.search(line) and not _ALIGNMENT_GUARD.search(line)]


def _op_name(target) -> str:
    return str(target).removesuffix(".default").removeprefix("torch.ops.")


def _aliased_cache(node: torch.fx.Node, roots: dict[torch.fx.Node, str]) -> str | None:
    """The cache a node's result aliases (a view or an in-place op's return), if any."""
    schema = getattr(node.target, "_schema", None)
    if schema is None or not any(r.alias_info is not None for r in schema.returns):
        return None
    sources = [a for a in node.args if isinstance(a, torch.fx.Node) and a in roots]
    return roots[sources[0]] if sources else None


def _written_caches(node: torch.fx.Node, roots: dict[torch.fx.Node, str]) -> list[str]:
    schema = node.target._schema
    values = dict(zip((a.name for a in schema.arguments), node.args)) | dict(node.kwargs)
    return [roots[values[a.name]] for a in schema.arguments
            if a.alias_info is not None and a.alias_info.is_write and values.get(a.name) in roots]


def cache_writes(program: ExportedProgram, first_cache: int) -> list[tuple[str, str]]:
    """(op, cache input name) of every write into a cache in the program's graph, in graph order."""
    user_inputs = program.graph_signature.user_inputs
    cache_inputs = set(user_inputs[first_cache:])
    roots = {n: n.name for n in program.graph.nodes if n.op == "placeholder" and n.name in cache_inputs}
    writes = []
    for node in program.graph.nodes:
        if node.op != "call_function" or not hasattr(node.target, "_schema"):
            continue
        writes += [(_op_name(node.target), cache) for cache in _written_caches(node, roots)]
        cache = _aliased_cache(node, roots)
        if cache is not None:
            roots[node] = cache
    return writes


def whole_cache_writes(program: ExportedProgram, first_cache: int) -> list[str]:
    """The cache writes that are neither a plugin op nor a row scatter, as 'op -> cache'."""
    return [f"{op} -> {cache}" for op, cache in cache_writes(program, first_cache)
            if not op.startswith("dayzero.") and not op.startswith(ROW_SCATTERS)]


def wrapper_cache_copies(source: str, first_cache: int) -> list[str]:
    """Lines of a generated wrapper that copy or clone a cache input."""
    caches = {name for name, index in _BINDING.findall(source) if int(index) >= first_cache}
    return [line for line in copy_lines(source) if any(re.search(rf"\b{c}\b", line) for c in caches)]
