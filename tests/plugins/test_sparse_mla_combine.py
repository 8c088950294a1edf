"""Flash-decoding's second pass (combine_kernel.py) vs its formula: fp32 and bf16 split outputs, splits that saw no
key (lse -inf) and rows that saw none at all."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.sparse_mla.combine_kernel import _warps_per_row, combine_splits_launcher
from tests.plugins.triton_env import DEVICE, needs_triton, poisoned, sizes

pytestmark = needs_triton


def combined(o_part: torch.Tensor, lse_part: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """o = sum_s exp(lse_s - lse) o_s, lse = log sum_s exp(lse_s); 0 and -inf where no split saw a key."""
    lse = torch.logsumexp(lse_part, 0)
    weights = torch.exp(lse_part - lse).nan_to_num(0.0)
    o = (weights[..., None] * o_part.float()).sum(0)
    return o, lse


@pytest.mark.parametrize("part_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("splits, tokens, heads, dim", sizes(cpu=[(2, 3, 2, 40), (5, 1, 3, 16), (9, 2, 1, 24)],
                                                             gpu=[(2, 64, 64, 512), (40, 7, 128, 512)]))
def test_combine_matches_its_formula(splits, tokens, heads, dim, part_dtype):
    gen = torch.Generator().manual_seed(splits * 100 + dim)
    o_part = torch.randn(splits, tokens, heads, dim, generator=gen).to(part_dtype)
    lse_part = torch.randn(splits, tokens, heads, generator=gen) * 4
    lse_part[-1, 0, :] = float("-inf")  # a split that saw no key
    lse_part[:, -1, -1] = float("-inf")  # a row that saw none
    o, lse = poisoned(tokens, heads, dim, dtype=torch.bfloat16), poisoned(tokens, heads)
    ref_o, ref_lse = combined(o_part, lse_part)
    # the attention kernels leave the output rows of splits that saw no key unwritten: they must not be read
    o_part[lse_part == float("-inf")] = float("nan")
    combine_splits_launcher(o_part.to(DEVICE), lse_part.to(DEVICE), o, lse)
    torch.testing.assert_close(lse.cpu(), ref_lse, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(o.cpu().float(), ref_o, rtol=1e-2, atol=1e-2)
    assert torch.equal(o.cpu()[-1, -1], torch.zeros(dim, dtype=torch.bfloat16))


def test_a_programs_warps_cover_one_row_in_16_byte_vectors():
    """Then every thread holds all of its columns' split rows and sums them in registers (bf16 rows over 4 warps are
    summed through shared memory: 22 us against 4.8)."""
    warps = [_warps_per_row(512, 4), _warps_per_row(512, 2), _warps_per_row(40, 2), _warps_per_row(4096, 4)]
    assert warps == [4, 2, 1, 4]
