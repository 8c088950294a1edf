"""Plugin ops in the exported program, for the target.

The model calls every hot path through `torch.ops.dayzero.*`, and torch.export keeps those ops whole (they are
registered custom / triton ops with fake implementations), so no graph rewrite is needed to get the fused ops in.
What differs per target is how AOTInductor compiles them: on CUDA it inlines each triton_op's Triton kernels into
the package; on CPU it must keep the op opaque so that the registered CPU kernel (the reference) runs.
`check_plugin_ops` fails the export when an op the model uses is missing from the graph (a decomposition).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch.export import ExportedProgram

from dayzero.errors import DayzeroError


def plugin_ops(program: ExportedProgram) -> dict[str, int]:
    """dayzero op name -> number of calls in the program's graph."""
    counts: dict[str, int] = {}
    for node in program.graph.nodes:
        if node.op == "call_function" and str(node.target).startswith("dayzero."):
            name = str(node.target).removeprefix("dayzero.").removesuffix(".default")
            counts[name] = counts.get(name, 0) + 1
    return counts


def check_plugin_ops(program: ExportedProgram, required: set[str]) -> dict[str, int]:
    found = plugin_ops(program)
    missing = required - set(found)
    if missing:
        raise DayzeroError(f"the exported graph lacks the plugin ops {sorted(missing)} (decomposed while tracing); "
                           "this is a dayzero bug: please report it with the model config")
    return found


def _keep_opaque() -> contextlib.AbstractContextManager:
    return torch._functorch.config.patch(decompose_custom_triton_ops=False)


def _inline_triton() -> contextlib.AbstractContextManager:
    return torch._functorch.config.patch(decompose_custom_triton_ops=True)


# device type -> how AOTInductor treats the plugin ops there
COMPILE_TARGETS: dict[str, Callable[[], contextlib.AbstractContextManager]] = {
    "cpu": _keep_opaque,
    "cuda": _inline_triton,
}


def compile_target(device: str) -> contextlib.AbstractContextManager:
    kind = torch.device(device).type
    if kind not in COMPILE_TARGETS:
        raise DayzeroError(f"no AOTInductor target for device {device!r}; use one of {sorted(COMPILE_TARGETS)}")
    return COMPILE_TARGETS[kind]()
