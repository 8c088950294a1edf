"""E8M0 scale codes (MXFP8's power-of-two scales) to floats, from the exponent bits."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def e8m0_scale(code):
    """uint8 E8M0 codes -> fp32 2^(code - 127), built from the exponent bits (exact for codes 1..254)."""
    return (code.to(tl.int32) << 23).to(tl.float32, bitcast=True)


@triton.jit
def e8m0_scale_bf16(code):
    """uint8 E8M0 codes -> bf16 2^(code - 127) (exact for codes 1..254)."""
    return (code.to(tl.int16) << 7).to(tl.bfloat16, bitcast=True)
