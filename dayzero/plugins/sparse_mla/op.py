"""`torch.ops.dayzero.sparse_mla_paged` / `dense_mla_paged`: absorbed MLA over the paged latent cache -> (o, lse)."""

from __future__ import annotations

import torch

from dayzero.plugins.registry import ONNX_DOMAIN, onnx_translation, plugin_op
from dayzero.plugins.sparse_mla import reference

KERNEL_Q_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
KERNEL_CACHE_DTYPES = (torch.uint8, torch.bfloat16, torch.float16, torch.float32)
# the kernel keeps a [rows, v_dim] fp32 accumulator in registers; wider values take the reference path
KERNEL_MAX_V_DIM = 1024


def kernel_supports(q: torch.Tensor, latent_cache: torch.Tensor, v_dim: int) -> bool:
    return (q.dtype in KERNEL_Q_DTYPES and latent_cache.dtype in KERNEL_CACHE_DTYPES and 0 < v_dim <= KERNEL_MAX_V_DIM
            and latent_cache.is_contiguous())


def _unit_last_stride(q: torch.Tensor) -> torch.Tensor:
    return q if q.stride(-1) == 1 else q.contiguous()


def _outputs_like(q: torch.Tensor, v_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    return q.new_empty(*q.shape[:2], v_dim), q.new_empty(q.shape[:2], dtype=torch.float32)


def _sparse_fake(q: torch.Tensor, latent_cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens: torch.Tensor,
                 indices: torch.Tensor, sm_scale: float, v_dim: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    return _outputs_like(q, v_dim)


def _dense_fake(q: torch.Tensor, latent_cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens: torch.Tensor,
                positions: torch.Tensor, sm_scale: float, v_dim: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    return _outputs_like(q, v_dim)


@plugin_op("sparse_mla_paged", cpu=reference.sparse_mla_paged, fake=_sparse_fake)
def sparse_mla_paged(q: torch.Tensor, latent_cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens: torch.Tensor,
                     indices: torch.Tensor, sm_scale: float, v_dim: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    if not kernel_supports(q, latent_cache, v_dim):
        return reference.sparse_mla_paged(q, latent_cache, block_table, cu_seqlens, indices, sm_scale, v_dim)
    from torch.library import wrap_triton

    from dayzero.plugins.sparse_mla import fp8_prefill, gluon_decode_kernel
    from dayzero.plugins.sparse_mla.kernel import sparse_mla_launcher

    if gluon_decode_kernel.gluon_decode_applies(q, latent_cache, v_dim):
        return gluon_decode_kernel.sparse_mla_decode_gluon_launcher(
            _unit_last_stride(q), latent_cache, block_table.contiguous(), cu_seqlens, indices, sm_scale, v_dim)
    if fp8_prefill.workspace_applies(q, latent_cache, cu_seqlens):
        workspace = fp8_prefill.bf16_workspace(latent_cache, block_table, cu_seqlens, indices, q.shape[-1] - v_dim)
        if workspace is not None:
            latent_cache, block_table = workspace
    return sparse_mla_launcher(_unit_last_stride(q), latent_cache, block_table.contiguous(), cu_seqlens, indices,
                               sm_scale, v_dim, launch=wrap_triton)


@plugin_op("dense_mla_paged", cpu=reference.dense_mla_paged, fake=_dense_fake)
def dense_mla_paged(q: torch.Tensor, latent_cache: torch.Tensor, block_table: torch.Tensor, cu_seqlens: torch.Tensor,
                    positions: torch.Tensor, sm_scale: float, v_dim: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    if not kernel_supports(q, latent_cache, v_dim):
        return reference.dense_mla_paged(q, latent_cache, block_table, cu_seqlens, positions, sm_scale, v_dim)
    from torch.library import wrap_triton

    from dayzero.plugins.sparse_mla.kernel import dense_mla_launcher

    return dense_mla_launcher(_unit_last_stride(q), latent_cache, block_table.contiguous(), cu_seqlens, positions,
                              sm_scale, v_dim, launch=wrap_triton)


_ONNX_FLOATS = ["tensor(float)", "tensor(bfloat16)", "tensor(float16)"]
_ONNX_INTS = ["tensor(int32)", "tensor(int64)"]


def _onnx_schema(name: str, keys: str):
    """The node's schema in the `dayzero` domain (onnx knows none for custom domains; onnxscript needs one)."""
    from onnx.defs import OpSchema

    param = OpSchema.FormalParameter
    return OpSchema(
        name, ONNX_DOMAIN, 1,
        inputs=[param("q", "T"), param("latent_cache", "C"), param("block_table", "I"), param("cu_seqlens", "I"),
                param(keys, "I")],
        outputs=[param("o", "T"), param("lse", "tensor(float)")],
        type_constraints=[("T", _ONNX_FLOATS, "query / output"), ("C", [*_ONNX_FLOATS, "tensor(uint8)"], "cache"),
                          ("I", _ONNX_INTS, "tables and keys")],
        attributes=[OpSchema.Attribute("sm_scale", OpSchema.AttrType.FLOAT, "score scale"),
                    OpSchema.Attribute("v_dim", OpSchema.AttrType.INT, "value width")],
    )


def _onnx_node(name: str, keys: str):
    import onnx
    import onnxscript

    if not onnx.defs.has(name, ONNX_DOMAIN):
        onnx.defs.register_schema(_onnx_schema(name, keys))
    return getattr(onnxscript.values.Opset(domain=ONNX_DOMAIN, version=1), name)


@onnx_translation(sparse_mla_paged)
def sparse_mla_paged_onnx(q, latent_cache, block_table, cu_seqlens, indices, sm_scale: float, v_dim: int = 512):
    """One `dayzero::sparse_mla_paged` node: outputs (o, lse)."""
    node = _onnx_node("sparse_mla_paged", "indices")
    return node(q, latent_cache, block_table, cu_seqlens, indices, sm_scale=sm_scale, v_dim=v_dim, _outputs=2)


@onnx_translation(dense_mla_paged)
def dense_mla_paged_onnx(q, latent_cache, block_table, cu_seqlens, positions, sm_scale: float, v_dim: int = 512):
    """One `dayzero::dense_mla_paged` node: outputs (o, lse)."""
    node = _onnx_node("dense_mla_paged", "positions")
    return node(q, latent_cache, block_table, cu_seqlens, positions, sm_scale=sm_scale, v_dim=v_dim, _outputs=2)
