"""Mutating plugin ops as functional ops, so the ONNX graph carries caches as inputs and outputs.

torch.export functionalizes an op that mutates a cache into `auto_functionalized_v2(op, ..., _all_bases=[...])`,
which the ONNX exporter cannot translate. This pass replaces each such node with a call of
`dayzero_functional::<op>`: the same arguments, no mutation, returning (*op results, *updated mutated args) in
schema order, which is exactly what the op's ONNX translation emits (one custom node whose extra outputs are the
updated caches). The functional op's CPU implementation clones the mutated args and runs the plugin op on them.
`caches_as_outputs` then turns the program's input mutations into user outputs, one new value per cache.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind, OutputSpec, TensorArgument

from dayzero.errors import DayzeroError
from dayzero.plugins.registry import ONNX_TRANSLATIONS

FUNCTIONAL_NAMESPACE = "dayzero_functional"
_AUTO_FUNCTIONALIZED = (torch.ops.higher_order.auto_functionalized_v2, torch.ops.higher_order.auto_functionalized)
_FUNCTIONAL_OPS: dict[object, torch._ops.OpOverload] = {}
_VIEW_SUFFIXES = ("_size", "_stride", "_storage_offset", "_slice_dim", "_slice_start", "_slice_end", "_alias")


def mutated_args(op: torch._ops.OpOverload) -> list[str]:
    return [a.name for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write]


def functional_op(op: torch._ops.OpOverload) -> torch._ops.OpOverload:
    """`dayzero_functional::<name>` for the mutating plugin op `op` (defined once per process)."""
    if op not in _FUNCTIONAL_OPS:
        name = op._schema.name.split("::")[-1]
        qualname = f"{FUNCTIONAL_NAMESPACE}::{name}"
        torch.library.define(qualname, _functional_schema(op))
        impl = _functional_impl(op)
        torch.library.impl(qualname, "CompositeExplicitAutograd", impl)
        torch.library.register_fake(qualname, impl)
        _FUNCTIONAL_OPS[op] = getattr(getattr(torch.ops, FUNCTIONAL_NAMESPACE), name).default
    return _FUNCTIONAL_OPS[op]


def _functional_schema(op: torch._ops.OpOverload) -> str:
    text = str(op._schema)
    args = re.sub(r"\(a\d*!\)", "", text[text.index("(") + 1:text.rindex(") ->")])
    # a list return, so that one updated cache and no result is still a sequence the getitem users index
    return f"({args}) -> Tensor[]"


def _functional_impl(op: torch._ops.OpOverload) -> Callable:
    names = [a.name for a in op._schema.arguments]
    mutated = mutated_args(op)

    def impl(*args, **kwargs):
        bound = {**dict(zip(names, args)), **kwargs}
        updated = [bound[n].clone() for n in mutated]
        results = op(**{**bound, **dict(zip(mutated, updated))})
        results = () if results is None else results if isinstance(results, tuple) else (results,)
        return [*results, *updated]

    return impl


def functional_translations() -> dict[object, Callable]:
    """The exporter's translation table: every plugin op, and the functional form of every mutating one."""
    table = dict(ONNX_TRANSLATIONS)
    for op, translation in ONNX_TRANSLATIONS.items():
        if mutated_args(op):
            table[functional_op(op)] = _as_sequence(translation)
    return table


def _as_sequence(translation: Callable) -> Callable:
    @functools.wraps(translation)
    def translate(*args, **kwargs):
        outputs = translation(*args, **kwargs)
        return list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]

    return translate


def functionalize_plugin_ops(ep: ExportedProgram) -> ExportedProgram:
    """Functionalize `ep` (aten ops kept) and replace every auto_functionalized plugin op with its functional op."""
    ep = ep.run_decompositions({})
    for node in list(ep.graph.nodes):
        if node.op == "call_function" and node.target in _AUTO_FUNCTIONALIZED:
            _replace_auto_functionalized(ep.graph, node)
    ep.graph.eliminate_dead_code()
    ep.graph.lint()
    ep.graph_module.recompile()
    return ep


def _replace_auto_functionalized(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    op, kwargs = node.args[0], node.kwargs
    if op not in ONNX_TRANSLATIONS:
        raise DayzeroError(f"{op} mutates its inputs and has no ONNX translation: add one in its plugin's op.py")
    mutated = mutated_args(op)
    bases = kwargs["_all_bases"]
    _check_plain_bases(op, mutated, kwargs)
    args = [bases[kwargs[f"_{a.name}_base_index"]] if a.name in mutated else kwargs.get(a.name, a.default_value)
            for a in op._schema.arguments]
    with graph.inserting_before(node):
        functional = graph.call_function(functional_op(op), tuple(args))
    num_results = len(op._schema.returns)
    # auto_functionalized returns (*results or (None,), *bases); the functional op (*results, *mutated args)
    offset = max(num_results, 1)
    functional.meta = {**node.meta, "val": [*node.meta["val"][:num_results], *node.meta["val"][offset:]]}
    for user in list(node.users):
        index = user.args[1]
        user.args = (functional, index if index < num_results else num_results + index - offset)
    graph.erase_node(node)


def _check_plain_bases(op, mutated: list[str], kwargs: dict) -> None:
    """Each mutated arg must be a whole graph value of its own (a cache input), not a view or a shared base."""
    views = [k for k in kwargs for n in mutated for s in _VIEW_SUFFIXES if k == f"_{n}{s}" and kwargs[k] is not None]
    indices = [kwargs[f"_{n}_base_index"] for n in mutated]
    if views or indices != list(range(len(mutated))):
        raise DayzeroError(f"{op} mutates a view of a cache ({views or indices}); ONNX export needs each mutated "
                           "cache to be a whole step input: pass cache tensors, not slices of them")


def caches_as_outputs(ep: ExportedProgram, num_caches: int) -> ExportedProgram:
    """Turn the input mutations of a functionalized `ep` into user outputs: (*user outputs, *new caches), one per
    cache (its last `num_caches` inputs, in order; an unmutated cache is passed through)."""
    sig = ep.graph_signature
    output = next(n for n in ep.graph.nodes if n.op == "output")
    values = dict(zip((s.arg.name for s in sig.output_specs), output.args[0]))
    updated = {s.target: s.arg.name for s in sig.output_specs if s.kind == OutputKind.USER_INPUT_MUTATION}
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    cache_inputs = sig.user_inputs[len(sig.user_inputs) - num_caches:]
    names = [*sig.user_outputs, *(updated.get(c, c) for c in cache_inputs)]
    output.args = (tuple(values.get(n, placeholders.get(n)) for n in names),)
    sig.output_specs[:] = [OutputSpec(OutputKind.USER_OUTPUT, TensorArgument(n), None) for n in names]
    ep._module_call_graph[0].signature.out_spec = pytree.tree_structure(tuple(names))
    ep.graph_module.recompile()
    return ep
