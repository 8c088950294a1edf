"""e4m3 -> bf16 by moving bits, with no conversion instruction (Hopper's F2F runs at a quarter of the ALU rate).

An e4m3 byte `s eeee mmm` placed as the bf16 `s 0000eeee mmm0000` is its value times 2**-120, exactly: normal
numbers keep 1.mmm with the exponent rebased from bias 7 to bias 127, and e4m3 subnormals (0.mmm * 2**-6) land on
bf16 subnormals (0.mmm * 2**-126). Multiplying by a power-of-two factor then only moves the exponent, so
`bits * (tile_scale * 2**(120 - Q_SHIFT))` is the dequantized value times 2**-Q_SHIFT, rounded once (never: the
product of two powers of two and a 4-bit significand is exact while it stays a bf16 normal). The caller multiplies
the query by 2**Q_SHIFT (exact in bf16) so that the scores need no correction, and the output accumulator by it.

Q_SHIFT = 64 keeps everything inside bf16's range: queries up to 2**63, tile scales from 2**-182 to 2**71, and
dequantized values down to 2**-62 (an e4m3 subnormal at the smallest scale the quantizer writes is 2**-31) stay
normal after the shift.
"""

from __future__ import annotations

import triton
import triton.language as tl

Q_SHIFT = 64
# 2**Q_SHIFT: the query's and the output's factor
Q_SCALE = tl.constexpr(2.0 ** Q_SHIFT)
# 2**(120 - Q_SHIFT): the factor that turns bit-placed bytes (value * 2**-120) into value * 2**-Q_SHIFT
BITS_TO_SHIFTED = tl.constexpr(2.0 ** (120 - Q_SHIFT))


# bytes 4k..4k+3 of one 32-bit register -> two registers of bf16 pairs, three instructions a pair. prmt's
# sign-replicating selectors (8 | byte) widen bytes 0, 1 (then 2, 3) to two int16 lanes, so a byte `s eeee mmm`
# becomes `ssssssss s eeee mmm`; shifted left by 4, a lane's bit 15 is s and bits 4-10 are eeee mmm, and the mask
# clears the sign copies in bits 11-14 and what crossed from the lower lane into bits 0-3. (The Gluon FP8 decode takes
# 0.158 / 0.095 ms at H128 / H64 against 0.165 / 0.098 with the five-instruction and / prmt / shr / or form.)
# One line, no escapes: AOTInductor pastes a kernel's globals into a string literal of its generated code, where a
# newline escape would end the line inside the string.
E4M3X4_TO_BF16X4 = tl.constexpr(
    "{"
    " .reg .b32 t;"
    " prmt.b32 t, $2, 0, 0x9180;"
    " shl.b32 t, t, 4;"
    " and.b32 $0, t, 0x87F087F0;"
    " prmt.b32 t, $2, 0, 0xB3A2;"
    " shl.b32 t, t, 4;"
    " and.b32 $1, t, 0x87F087F0;"
    " }")


# the same placement, then each bf16 pair times a pair of bf16 factors ($3, $4: one factor for each of the four
# values), rounded once as `mul.bf16` would (the Gluon decode's; two values an instruction)
E4M3X4_TIMES_BF16X4 = tl.constexpr(
    "{"
    " .reg .b32 t;"
    " prmt.b32 t, $2, 0, 0x9180;"
    " shl.b32 t, t, 4;"
    " and.b32 t, t, 0x87F087F0;"
    " mul.rn.bf16x2 $0, t, $3;"
    " prmt.b32 t, $2, 0, 0xB3A2;"
    " shl.b32 t, t, 4;"
    " and.b32 t, t, 0x87F087F0;"
    " mul.rn.bf16x2 $1, t, $4;"
    " }")


@triton.jit
def e4m3_bytes_as_bf16(raw):
    """uint8 e4m3 bytes [...] -> bf16 [...] = each value * 2**-120 (inline PTX: compiled kernels only)."""
    return tl.inline_asm_elementwise(E4M3X4_TO_BF16X4, "=r,=r,r", [raw], dtype=tl.bfloat16, is_pure=True, pack=4)


@triton.jit
def _place(word, byte: tl.constexpr):
    """fp32 bits of byte `byte` of each uint32 word: magnitude << 20 and sign to bit 31 (the bf16 placement, 16 bits
    up)."""
    mag = (word >> (8 * byte)) & 0x7F
    sign = (word >> (8 * byte + 7)) & 1
    return (mag << 20) | (sign << 31)


@triton.jit
def e4m3_words_as_fp32(words):
    """int32 words [..., W], 4 e4m3 bytes each (little endian) -> fp32 [..., W, 2, 2] = each value * 2**-120, in
    memory order once the last three dims are merged. The interpreter's version of `e4m3_bytes_as_bf16`: fp32, as
    its bf16 conversions lose subnormals."""
    w = words.to(tl.uint32, bitcast=True)
    b0 = _place(w, 0)
    b1 = _place(w, 1)
    b2 = _place(w, 2)
    b3 = _place(w, 3)
    # join(join(b0, b2), join(b1, b3))[..., k, j] is byte 2k + j: the memory order after a reshape
    bits = tl.join(tl.join(b0, b2), tl.join(b1, b3))
    return bits.to(tl.float32, bitcast=True)
