"""`torch.ops.dayzero.recurrent_kda_pool`, `fused_kda_decode` and `fused_gdn_decode`: KDA and gated DeltaNet decode
/ verify over the state pool.

Both mutate their pools in place (`mutates_args`); on CPU they run the reference. The Python wrappers at the
bottom keep the reference signatures (optional scale) for the model.
"""

from __future__ import annotations

import torch

from dayzero.plugins.kda import reference
from dayzero.plugins.registry import onnx_translation, plugin_op
from dayzero.plugins.short_conv.op import onnx_custom_node
from dayzero.plugins.token_rows import has_contiguous_tokens, has_flat_token_rows


def _pool_cpu(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
              state: torch.Tensor, state_slots: torch.Tensor, num_accepted: torch.Tensor, scale: float,
              use_qk_l2norm: bool) -> torch.Tensor:
    return reference.recurrent_kda_pool(q, k, v, g, beta, state, state_slots, num_accepted, scale, use_qk_l2norm)


def _pool_fake(q, k, v, g, beta, state, state_slots, num_accepted, scale, use_qk_l2norm) -> torch.Tensor:
    return v.new_empty(v.shape)


def _token_rows(x: torch.Tensor) -> torch.Tensor:
    """x [B, L, ...] as it is when each token's trailing block is contiguous (the kernel takes batch and token
    strides, so views of a fused projection need no copy), else a contiguous copy."""
    return x if has_contiguous_tokens(x) else x.contiguous()


@plugin_op("recurrent_kda_pool", cpu=_pool_cpu, fake=_pool_fake, mutates_args=("state",))
def recurrent_kda_pool_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                          state: torch.Tensor, state_slots: torch.Tensor, num_accepted: torch.Tensor, scale: float,
                          use_qk_l2norm: bool) -> torch.Tensor:
    from torch.library import wrap_triton

    from dayzero.plugins.kda.recurrent_kernel import recurrent_kda_pool_launcher

    q, k, v, g, beta = (_token_rows(x) for x in (q, k, v, g, beta))
    return recurrent_kda_pool_launcher(q, k, v, g, beta, state, state_slots.contiguous(), num_accepted, scale,
                                       use_qk_l2norm, launch=wrap_triton)


def _fused_cpu(qkv: torch.Tensor, conv_weight: torch.Tensor, conv_state: torch.Tensor, z: torch.Tensor,
               A_log: torch.Tensor, dt_bias: torch.Tensor, lower_bound: float | None, beta_logits: torch.Tensor,
               state: torch.Tensor, state_slots: torch.Tensor, num_accepted: torch.Tensor,
               scale: float) -> torch.Tensor:
    return reference.fused_kda_decode_reference(qkv, conv_weight, conv_state, z, A_log, dt_bias, lower_bound,
                                                beta_logits, state, state_slots, num_accepted, scale)


def _fused_fake(qkv, conv_weight, conv_state, z, A_log, dt_bias, lower_bound, beta_logits, state, state_slots,
                num_accepted, scale) -> torch.Tensor:
    return qkv.new_empty(z.shape)


@plugin_op("fused_kda_decode", cpu=_fused_cpu, fake=_fused_fake, mutates_args=("conv_state", "state"))
def fused_kda_decode_op(qkv: torch.Tensor, conv_weight: torch.Tensor, conv_state: torch.Tensor, z: torch.Tensor,
                        A_log: torch.Tensor, dt_bias: torch.Tensor, lower_bound: float | None,
                        beta_logits: torch.Tensor, state: torch.Tensor, state_slots: torch.Tensor,
                        num_accepted: torch.Tensor, scale: float) -> torch.Tensor:
    from torch.library import wrap_triton

    from dayzero.plugins.kda.recurrent_kernel import fused_kda_decode_launcher

    qkv, beta_logits = (x if has_flat_token_rows(x) else x.contiguous() for x in (qkv, beta_logits))
    conv_weight, z, A_log, dt_bias = (x.contiguous() for x in (conv_weight, z, A_log, dt_bias))
    return fused_kda_decode_launcher(qkv, conv_weight, conv_state, z, A_log, dt_bias, lower_bound, beta_logits,
                                     state, state_slots.contiguous(), num_accepted, scale, launch=wrap_triton)


def _gdn_cpu(qkv: torch.Tensor, conv_weight: torch.Tensor, conv_state: torch.Tensor, a: torch.Tensor,
             A_log: torch.Tensor, dt_bias: torch.Tensor, b: torch.Tensor, state: torch.Tensor,
             state_slots: torch.Tensor, num_accepted: torch.Tensor, scale: float) -> torch.Tensor:
    return reference.fused_gdn_decode_reference(qkv, conv_weight, conv_state, a, A_log, dt_bias, b, state,
                                                state_slots, num_accepted, scale)


def _gdn_fake(qkv, conv_weight, conv_state, a, A_log, dt_bias, b, state, state_slots, num_accepted, scale):
    return qkv.new_empty(*a.shape, state.shape[-1])


@plugin_op("fused_gdn_decode", cpu=_gdn_cpu, fake=_gdn_fake, mutates_args=("conv_state", "state"))
def fused_gdn_decode_op(qkv: torch.Tensor, conv_weight: torch.Tensor, conv_state: torch.Tensor, a: torch.Tensor,
                        A_log: torch.Tensor, dt_bias: torch.Tensor, b: torch.Tensor, state: torch.Tensor,
                        state_slots: torch.Tensor, num_accepted: torch.Tensor, scale: float) -> torch.Tensor:
    from torch.library import wrap_triton

    from dayzero.plugins.kda.gdn_decode_kernel import fused_gdn_decode_launcher

    qkv, a, b = (x if has_flat_token_rows(x) else x.contiguous() for x in (qkv, a, b))
    conv_weight, A_log, dt_bias = (x.contiguous() for x in (conv_weight, A_log, dt_bias))
    return fused_gdn_decode_launcher(qkv, conv_weight, conv_state, a, A_log, dt_bias, b, state,
                                     state_slots.contiguous(), num_accepted, scale, launch=wrap_triton)


@onnx_translation(recurrent_kda_pool_op)
def recurrent_kda_pool_onnx(q, k, v, g, beta, state, state_slots, num_accepted, scale: float, use_qk_l2norm: bool):
    """One `dayzero::recurrent_kda_pool` node: outputs (o, updated state)."""
    node = onnx_custom_node("recurrent_kda_pool", ["q", "k", "v", "g", "beta", "state", "state_slots",
                                                   "num_accepted"], ["o", "state_out"],
                            {"scale": "float", "use_qk_l2norm": "int"})
    return node(q, k, v, g, beta, state, state_slots, num_accepted, scale=scale, use_qk_l2norm=int(use_qk_l2norm))


@onnx_translation(fused_kda_decode_op)
def fused_kda_decode_onnx(qkv, conv_weight, conv_state, z, A_log, dt_bias, lower_bound, beta_logits, state,
                          state_slots, num_accepted, scale: float):
    """One `dayzero::fused_kda_decode` node: outputs (o, updated conv_state, updated state); no `lower_bound`
    attribute means the Kimi-Linear softplus gate."""
    node = onnx_custom_node("fused_kda_decode", ["qkv", "conv_weight", "conv_state", "z", "A_log", "dt_bias",
                                                 "beta_logits", "state", "state_slots", "num_accepted"],
                            ["o", "conv_state_out", "state_out"], {"scale": "float", "lower_bound": "float"})
    gate = {} if lower_bound is None else {"lower_bound": lower_bound}
    return node(qkv, conv_weight, conv_state, z, A_log, dt_bias, beta_logits, state, state_slots, num_accepted,
                scale=scale, **gate)


@onnx_translation(fused_gdn_decode_op)
def fused_gdn_decode_onnx(qkv, conv_weight, conv_state, a, A_log, dt_bias, b, state, state_slots, num_accepted,
                          scale: float):
    """One `dayzero::fused_gdn_decode` node: outputs (o, updated conv_state, updated state)."""
    node = onnx_custom_node("fused_gdn_decode", ["qkv", "conv_weight", "conv_state", "a", "A_log", "dt_bias", "b",
                                                 "state", "state_slots", "num_accepted"],
                            ["o", "conv_state_out", "state_out"], {"scale": "float"})
    return node(qkv, conv_weight, conv_state, a, A_log, dt_bias, b, state, state_slots, num_accepted, scale=scale)


def recurrent_kda_pool(
    q, k, v, g, beta, state, state_slots, num_accepted, scale=None, use_qk_l2norm_in_kernel=False,
) -> torch.Tensor:
    """`reference.recurrent_kda_pool`'s contract on the registered op (mutates `state`)."""
    scale = k.shape[-1] ** -0.5 if scale is None else float(scale)
    return recurrent_kda_pool_op(q, k, v, g, beta, state, state_slots, num_accepted, scale,
                                 bool(use_qk_l2norm_in_kernel))


def fused_kda_decode(
    qkv, conv_weight, conv_state, z, A_log, dt_bias, lower_bound, beta_logits, state, state_slots, num_accepted,
    scale=None,
) -> torch.Tensor:
    """`reference.fused_kda_decode_reference`'s contract on the registered op (mutates both pools)."""
    scale = z.shape[-1] ** -0.5 if scale is None else float(scale)
    lower_bound = None if lower_bound is None else float(lower_bound)
    return fused_kda_decode_op(qkv, conv_weight, conv_state, z, A_log, dt_bias, lower_bound, beta_logits, state,
                               state_slots, num_accepted, scale)


def fused_gdn_decode(
    qkv, conv_weight, conv_state, a, A_log, dt_bias, b, state, state_slots, num_accepted, scale=None,
) -> torch.Tensor:
    """`reference.fused_gdn_decode_reference`'s contract on the registered op (mutates both pools)."""
    scale = state.shape[-2] ** -0.5 if scale is None else float(scale)
    return fused_gdn_decode_op(qkv, conv_weight, conv_state, a, A_log, dt_bias, b, state, state_slots, num_accepted,
                               scale)
