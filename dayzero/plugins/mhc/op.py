"""`torch.ops.dayzero.mhc_pre` / `mhc_post`: a hyper-connection's sublayer input from the streams (with the post
and comb coefficients the step after the sublayer needs), and the streams after the sublayer.
`mhc_post_project` / `mhc_pre_from_partials`: the same pair with the next connection's projection of the streams
done by the step that writes them (partial sums over column slices of D), so that the step before the next sublayer
reads the streams once."""

from __future__ import annotations

import torch

from dayzero.plugins.mhc import reference
from dayzero.plugins.mhc.plan import post_project_slices
from dayzero.plugins.onnx_node import dayzero_node
from dayzero.plugins.registry import onnx_translation, plugin_op


def _pre_fake(streams, fn, base, scale, norm_eps, hc_eps, sinkhorn_iters):
    tokens, hc, dim = streams.shape
    return (streams.new_empty(tokens, dim), streams.new_empty(tokens, hc, dtype=torch.float32),
            streams.new_empty(tokens, hc, hc, dtype=torch.float32))


def _post_fake(out, residual, post, comb):
    return residual.new_empty(residual.shape)


def _post_project_fake(out, residual, post, comb, fn):
    tokens, _, dim = residual.shape
    slices = post_project_slices(tokens, dim, residual.device)
    return (residual.new_empty(residual.shape), residual.new_empty(slices, tokens, fn.shape[0], dtype=torch.float32),
            residual.new_empty(slices, tokens, dtype=torch.float32))


def _post_project_cpu(out, residual, post, comb, fn):
    slices = post_project_slices(residual.shape[0], residual.shape[2], residual.device)
    return reference.mhc_post_project(out, residual, post, comb, fn, slices)


def _pre_from_partials_fake(streams, mix_part, sq_part, base, scale, norm_eps, hc_eps, sinkhorn_iters):
    return _pre_fake(streams, None, base, scale, norm_eps, hc_eps, sinkhorn_iters)


@plugin_op("mhc_pre", cpu=reference.mhc_pre, fake=_pre_fake)
def mhc_pre(streams: torch.Tensor, fn: torch.Tensor, base: torch.Tensor, scale: torch.Tensor, norm_eps: float,
            hc_eps: float, sinkhorn_iters: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    from torch.library import wrap_triton

    from dayzero.plugins.mhc.kernel import mhc_pre_launcher

    return mhc_pre_launcher(streams.contiguous(), fn.contiguous(), base.contiguous(), scale.contiguous(), norm_eps,
                            hc_eps, sinkhorn_iters, launch=wrap_triton)


@plugin_op("mhc_post", cpu=reference.mhc_post, fake=_post_fake)
def mhc_post(out: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor) -> torch.Tensor:
    from torch.library import wrap_triton

    from dayzero.plugins.mhc.kernel import mhc_post_launcher

    return mhc_post_launcher(out.contiguous(), residual.contiguous(), post.contiguous(), comb.contiguous(),
                             launch=wrap_triton)


@plugin_op("mhc_post_project", cpu=_post_project_cpu, fake=_post_project_fake)
def mhc_post_project(out: torch.Tensor, residual: torch.Tensor, post: torch.Tensor, comb: torch.Tensor,
                     fn: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    from torch.library import wrap_triton

    from dayzero.plugins.mhc.kernel import mhc_post_project_launcher

    return mhc_post_project_launcher(out.contiguous(), residual.contiguous(), post.contiguous(), comb.contiguous(),
                                     fn.contiguous(), launch=wrap_triton)


@plugin_op("mhc_pre_from_partials", cpu=reference.mhc_pre_from_partials, fake=_pre_from_partials_fake)
def mhc_pre_from_partials(streams: torch.Tensor, mix_part: torch.Tensor, sq_part: torch.Tensor, base: torch.Tensor,
                          scale: torch.Tensor, norm_eps: float, hc_eps: float,
                          sinkhorn_iters: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    from torch.library import wrap_triton

    from dayzero.plugins.mhc.kernel import mhc_finish_launcher

    return mhc_finish_launcher(mix_part.contiguous(), sq_part.contiguous(), streams.contiguous(), base.contiguous(),
                               scale.contiguous(), norm_eps, hc_eps, sinkhorn_iters, launch=wrap_triton)


@onnx_translation(mhc_pre)
def _mhc_pre_onnx(streams, fn, base, scale, norm_eps: float, hc_eps: float, sinkhorn_iters: int):
    return dayzero_node("MhcPre", [streams, fn, base, scale], [None, None, None], norm_eps=norm_eps, hc_eps=hc_eps,
                        sinkhorn_iters=sinkhorn_iters)


@onnx_translation(mhc_post)
def _mhc_post_onnx(out, residual, post, comb):
    return dayzero_node("MhcPost", [out, residual, post, comb], [residual])


@onnx_translation(mhc_post_project)
def _mhc_post_project_onnx(out, residual, post, comb, fn):
    return dayzero_node("MhcPostProject", [out, residual, post, comb, fn], [residual, None, None])


@onnx_translation(mhc_pre_from_partials)
def _mhc_pre_from_partials_onnx(streams, mix_part, sq_part, base, scale, norm_eps: float, hc_eps: float,
                                sinkhorn_iters: int):
    return dayzero_node("MhcPreFromPartials", [streams, mix_part, sq_part, base, scale], [None, None, None],
                        norm_eps=norm_eps, hc_eps=hc_eps, sinkhorn_iters=sinkhorn_iters)
