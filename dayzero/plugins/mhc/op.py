"""`torch.ops.dayzero.mhc_pre` / `mhc_post`: a hyper-connection's sublayer input from the streams (with the post
and comb coefficients the step after the sublayer needs), and the streams after the sublayer."""

from __future__ import annotations

import torch

from dayzero.plugins.mhc import reference
from dayzero.plugins.onnx_node import dayzero_node
from dayzero.plugins.registry import onnx_translation, plugin_op


def _pre_fake(streams, fn, base, scale, norm_eps, hc_eps, sinkhorn_iters):
    tokens, hc, dim = streams.shape
    return (streams.new_empty(tokens, dim), streams.new_empty(tokens, hc, dtype=torch.float32),
            streams.new_empty(tokens, hc, hc, dtype=torch.float32))


def _post_fake(out, residual, post, comb):
    return residual.new_empty(residual.shape)


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


@onnx_translation(mhc_pre)
def _mhc_pre_onnx(streams, fn, base, scale, norm_eps: float, hc_eps: float, sinkhorn_iters: int):
    return dayzero_node("MhcPre", [streams, fn, base, scale], [None, None, None], norm_eps=norm_eps, hc_eps=hc_eps,
                        sinkhorn_iters=sinkhorn_iters)


@onnx_translation(mhc_post)
def _mhc_post_onnx(out, residual, post, comb):
    return dayzero_node("MhcPost", [out, residual, post, comb], [residual])
