"""Byte layouts of the quantized caches: exact placement of values and scales, round trips within e4m3 error."""

from __future__ import annotations

import torch

from dayzero.plugins.paged_cache import formats as F
from dayzero.plugins.quant import reference as Q
from tests.helpers import rel_err


def test_fp8_latent_record_is_656_bytes_and_round_trips():
    assert F.fp8_latent_record_bytes(512, 64) == 656
    rows = torch.randn(9, 576)
    records = F.pack_fp8_latent(rows, 64)
    assert records.shape == (9, 656) and records.dtype == torch.uint8
    q, scales = Q.fp8_block_quantize(rows[:, :512])
    assert torch.equal(records[:, :512], q.view(torch.uint8))
    assert torch.equal(records[:, 512:528].contiguous().view(torch.float32), scales)
    assert torch.equal(records[:, 528:].contiguous().view(torch.bfloat16), rows[:, 512:].bfloat16())
    back = F.unpack_fp8_latent(records, 64)
    assert rel_err(back[:, :512], rows[:, :512]) < 0.04 and rel_err(back[:, 512:], rows[:, 512:]) < 0.01


def test_mxfp8_index_cache_is_page_major():
    dim = 128
    cache = torch.zeros(F.index_cache_shape(2, dim, True), dtype=torch.uint8)
    assert cache.shape == (2, 64 * 132)
    keys = torch.randn(3, dim)
    slots = torch.tensor([64 + 5, 0, -1])
    F.write_index_keys(cache, keys, slots)
    q, scales = Q.mxfp8_quantize(keys[:2])
    assert torch.equal(cache[1, 5 * dim : 6 * dim], q[0].view(torch.uint8))
    assert torch.equal(cache[1, 64 * dim + 5 * 4 : 64 * dim + 6 * 4], scales[0])
    assert torch.equal(cache[0, :dim], q[1].view(torch.uint8))
    back = F.gather_index_keys(cache, torch.tensor([0, 1]), torch.tensor([69, 0]), dim)
    assert rel_err(back, keys[:2]) < 0.04


def test_plain_formats_store_rows_unchanged():
    latent = torch.zeros(F.latent_cache_shape(2, 128, 16, False))
    rows = torch.randn(4, 144)
    slots = torch.tensor([3, 70, -1, 127])
    F.write_latent(latent, rows, slots, 16)
    got = F.gather_latent(latent, torch.tensor([0, 1]), torch.tensor([3, 70, 127]), 16)
    assert torch.equal(got, rows[[0, 1, 3]])
