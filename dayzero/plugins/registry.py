"""Registration of plugin ops as `torch.ops.dayzero.*`.

Each op has one typed signature. On CUDA it runs the Triton implementation (`torch.library.triton_op`, so that
torch.export / AOTInductor see and compile the Triton kernels in); on CPU it dispatches to the pure-torch
reference; a fake implementation gives shapes for tracing. Without Triton installed, the reference serves every
device. ONNX translations (custom-domain nodes, the contract a TensorRT / ONNX Runtime plugin implements) are
collected in `ONNX_TRANSLATIONS` for the exporter.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable

import torch

HAS_TRITON = importlib.util.find_spec("triton") is not None
ONNX_DOMAIN = "dayzero"
# torch op overload -> onnxscript function emitting the op's custom-domain node
ONNX_TRANSLATIONS: dict[object, Callable] = {}
# name -> registered op, in registration order
PLUGIN_OPS: dict[str, object] = {}


def plugin_op(name: str, *, cpu: Callable, fake: Callable, mutates_args: Iterable[str] = ()):
    """Decorator over the CUDA implementation: registers `torch.ops.dayzero.<name>` and returns the op."""

    def register(cuda_impl: Callable):
        qualname = f"{ONNX_DOMAIN}::{name}"
        if HAS_TRITON:
            op = torch.library.triton_op(qualname, cuda_impl, mutates_args=tuple(mutates_args))
        else:
            # the schema comes from the typed CUDA signature: the CPU and fake functions carry no annotations
            schema = torch.library.infer_schema(cuda_impl, mutates_args=tuple(mutates_args))
            op = torch.library.custom_op(qualname, cpu, mutates_args=tuple(mutates_args), schema=schema)
        op.register_kernel("cpu", cpu)
        op.register_fake(fake)
        # kept for tests that hold the fake's shapes and strides against the Triton body's
        op.dayzero_impls = {"cuda": cuda_impl, "cpu": cpu, "fake": fake}
        PLUGIN_OPS[name] = op
        return op

    return register


def onnx_translation(op) -> Callable:
    """Decorator: record the onnxscript translation of `op` (a registered plugin op)."""

    def record(fn: Callable) -> Callable:
        ONNX_TRANSLATIONS[op._opoverload if hasattr(op, "_opoverload") else op] = fn
        return fn

    return record
