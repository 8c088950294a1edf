"""Small Triton helpers shared by the kernels."""

from __future__ import annotations

import os

import triton
import triton.language as tl

# The Triton interpreter (CPU tests) computes tl.dot on bf16 operands wrongly (triton 3.9: errors of 1e10);
# under it, dots run on fp32 copies. On a GPU this flag is off and operands stay in their dtype.
INTERPRETED = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") == "1")


@triton.jit
def dot(a, b):
    """tl.dot with fp32 accumulation that is also right under the interpreter."""
    if INTERPRETED:
        out = tl.dot(a.to(tl.float32), b.to(tl.float32))
    else:
        out = tl.dot(a, b)
    return out


@triton.jit
def mma(a, b, acc, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """acc + a @ b; UPCAST feeds fp32 copies (exact for bf16 values) where the dot cannot take bf16 directly."""
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    return tl.dot(a, b, acc, input_precision=PRECISION)


@triton.jit
def online_softmax_step(s, m_i, l_i):
    """One key block of an online softmax in base 2: scores s [M, N] (-inf where masked), the running max m_i and sum
    l_i [M] -> (p [M, N], alpha [M]: the factor on what was accumulated so far, the new max, the new sum). Rows that
    have seen no key yet keep m = -inf; they exponentiate against 0 so that they stay exactly 0."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    return p, alpha, m_new, l_i * alpha + tl.sum(p, 1)
