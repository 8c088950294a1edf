"""`torch.ops.dayzero.attnres_mix*`: the AttnRes depth mix over listed sources or a block buffer plus a partial sum,
optionally also emitting the next sublayer's input RMSNorm; and the Python wrappers the model calls."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from dayzero.plugins.attnres import reference
from dayzero.plugins.onnx_node import dayzero_node
from dayzero.plugins.registry import onnx_translation, plugin_op

# a listed-sources op with more sources than the kernel has pointer slots stacks them (rare: K3.1 needs 9)
_MAX_LISTED = 16


def _flat(sources: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [s.contiguous() for s in sources]


def _mix_fake(query, sources, rms_weight, eps):
    return sources[0].new_empty(sources[0].shape)


def _mix_norm_fake(query, sources, rms_weight, eps, norm_weight, norm_eps):
    return sources[0].new_empty(sources[0].shape), sources[0].new_empty(sources[0].shape)


def _blocks_fake(query, blocks, num_blocks, partial, rms_weight, eps):
    return blocks.new_empty(blocks.shape[1:])


def _blocks_norm_fake(query, blocks, num_blocks, partial, rms_weight, eps, norm_weight, norm_eps):
    return blocks.new_empty(blocks.shape[1:]), blocks.new_empty(blocks.shape[1:])


def _cuda_listed(query, sources, rms_weight, eps, norm_weight=None, norm_eps=1e-6):
    from torch.library import wrap_triton

    from dayzero.plugins.attnres.kernel import attnres_mix_blocks_launcher, attnres_mix_launcher

    sources = _flat(sources)
    if len(sources) > _MAX_LISTED:
        return attnres_mix_blocks_launcher(query, torch.stack(sources[:-1]), len(sources) - 1, sources[-1],
                                           rms_weight, eps, norm_weight, norm_eps, launch=wrap_triton)
    return attnres_mix_launcher(query, sources, rms_weight, eps, norm_weight, norm_eps, launch=wrap_triton)


def _cuda_blocks(query, blocks, num_blocks, partial, rms_weight, eps, norm_weight=None, norm_eps=1e-6):
    from torch.library import wrap_triton

    from dayzero.plugins.attnres.kernel import attnres_mix_blocks_launcher

    partial = None if partial is None else partial.contiguous()
    return attnres_mix_blocks_launcher(query, blocks, num_blocks, partial, rms_weight, eps, norm_weight, norm_eps,
                                       launch=wrap_triton)


@plugin_op("attnres_mix", cpu=reference.attnres_mix, fake=_mix_fake)
def attnres_mix_op(query: torch.Tensor, sources: list[torch.Tensor], rms_weight: torch.Tensor,
                   eps: float) -> torch.Tensor:
    return _cuda_listed(query, sources, rms_weight, eps)[0]


@plugin_op("attnres_mix_norm", cpu=reference.attnres_mix_norm, fake=_mix_norm_fake)
def attnres_mix_norm_op(query: torch.Tensor, sources: list[torch.Tensor], rms_weight: torch.Tensor, eps: float,
                        norm_weight: torch.Tensor, norm_eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return _cuda_listed(query, sources, rms_weight, eps, norm_weight, norm_eps)


@plugin_op("attnres_mix_blocks", cpu=reference.attnres_mix_blocks, fake=_blocks_fake)
def attnres_mix_blocks_op(query: torch.Tensor, blocks: torch.Tensor, num_blocks: int, partial: torch.Tensor | None,
                          rms_weight: torch.Tensor, eps: float) -> torch.Tensor:
    return _cuda_blocks(query, blocks, num_blocks, partial, rms_weight, eps)[0]


@plugin_op("attnres_mix_blocks_norm", cpu=reference.attnres_mix_blocks_norm, fake=_blocks_norm_fake)
def attnres_mix_blocks_norm_op(query: torch.Tensor, blocks: torch.Tensor, num_blocks: int,
                               partial: torch.Tensor | None, rms_weight: torch.Tensor, eps: float,
                               norm_weight: torch.Tensor, norm_eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return _cuda_blocks(query, blocks, num_blocks, partial, rms_weight, eps, norm_weight, norm_eps)


def attnres_mix(
    query: torch.Tensor, residuals: torch.Tensor | Sequence[torch.Tensor], rms_weight: torch.Tensor,
    eps: float = 1e-6, norm_weight: torch.Tensor | None = None, norm_eps: float | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """query [D], residuals N x [..., D] (a sequence or a stacked [N, ..., D] tensor), rms_weight [D] -> [..., D].

    With norm_weight, returns (mix, RMSNorm(mix) * norm_weight) with norm_eps (default eps).
    """
    if isinstance(residuals, torch.Tensor):
        return attnres_mix_blocks(query, residuals, residuals.shape[0], None, rms_weight, eps, norm_weight, norm_eps)
    if len(residuals) == 0:
        raise ValueError("attnres_mix needs at least one residual source")
    sources = list(residuals)
    if norm_weight is None:
        return attnres_mix_op(query, sources, rms_weight, eps)
    return attnres_mix_norm_op(query, sources, rms_weight, eps, norm_weight, eps if norm_eps is None else norm_eps)


def attnres_mix_blocks(
    query: torch.Tensor, blocks: torch.Tensor, num_blocks: int, partial: torch.Tensor | None,
    rms_weight: torch.Tensor, eps: float = 1e-6, norm_weight: torch.Tensor | None = None,
    norm_eps: float | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Mix over blocks[:num_blocks] (blocks [max_blocks, T, D], the engine's preallocated closed-block buffer) and
    the running partial sum [T, D] (or None) -> [T, D]; with norm_weight also RMSNorm(mix) * norm_weight."""
    if norm_weight is None:
        return attnres_mix_blocks_op(query, blocks, num_blocks, partial, rms_weight, eps)
    return attnres_mix_blocks_norm_op(query, blocks, num_blocks, partial, rms_weight, eps, norm_weight,
                                      eps if norm_eps is None else norm_eps)


@onnx_translation(attnres_mix_op)
def _attnres_mix_onnx(query, sources, rms_weight, eps: float):
    return dayzero_node("AttnresMix", [query, rms_weight, *sources], [sources[0]], eps=eps)


@onnx_translation(attnres_mix_norm_op)
def _attnres_mix_norm_onnx(query, sources, rms_weight, eps: float, norm_weight, norm_eps: float):
    return dayzero_node("AttnresMixNorm", [query, rms_weight, norm_weight, *sources], [sources[0]] * 2, eps=eps,
                        norm_eps=norm_eps)


@onnx_translation(attnres_mix_blocks_op)
def _attnres_mix_blocks_onnx(query, blocks, num_blocks: int, partial, rms_weight, eps: float):
    inputs = [query, rms_weight, blocks] + ([] if partial is None else [partial])
    return dayzero_node("AttnresMixBlocks", inputs, [None], num_blocks=num_blocks,
                        has_partial=partial is not None, eps=eps)


@onnx_translation(attnres_mix_blocks_norm_op)
def _attnres_mix_blocks_norm_onnx(query, blocks, num_blocks: int, partial, rms_weight, eps: float, norm_weight,
                                  norm_eps: float):
    inputs = [query, rms_weight, norm_weight, blocks] + ([] if partial is None else [partial])
    return dayzero_node("AttnresMixBlocksNorm", inputs, [None, None], num_blocks=num_blocks,
                        has_partial=partial is not None, eps=eps, norm_eps=norm_eps)
