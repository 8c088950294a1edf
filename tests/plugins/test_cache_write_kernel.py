"""The fused cache writes (quantize + scatter by slot_mapping) vs formats.py's reference writes, byte for byte, and
the registered ops write_latent / write_index_keys that dispatch to them by the cache format."""

from __future__ import annotations

import pytest
import torch

from dayzero.plugins.paged_cache import formats as F
from tests.plugins.triton_env import DEVICE, ON_GPU, needs_triton, sizes

# on a GPU every test here runs under `pytest -m gpu` (the device-independent ones too: they are fast)
pytestmark = [needs_triton, *([pytest.mark.gpu] if ON_GPU else [])]


def wide_rows(tokens: int, width: int, dtype: torch.dtype) -> torch.Tensor:
    """Random rows on DEVICE spanning magnitudes 1e-5 .. 1e3, one all-zero row and one all-zero 128-tile."""
    rows = torch.randn(tokens, width) * torch.logspace(-5, 3, width)[torch.randperm(width)]
    rows[tokens // 2] = 0.0
    rows[0, :128] = 0.0
    return rows.to(dtype).to(DEVICE)


def scattered_slots(pages: int, tokens: int) -> torch.Tensor:
    """Distinct slots over all pages (so neighbours land in different pages), with padding (-1) sprinkled in."""
    slots = torch.randperm(pages * 64)[:tokens]
    slots[torch.arange(0, tokens, 7)] = -1
    return slots.to(DEVICE)


def garbage_cache(shape, dtype: torch.dtype) -> torch.Tensor:
    """A cache full of random bytes on DEVICE: rows the write skips must keep them, rows it writes must lose them."""
    return torch.randint(0, 256, (*shape[:-1], shape[-1] * torch.empty((), dtype=dtype).element_size()),
                         dtype=torch.uint8, device=DEVICE).view(dtype)


def assert_same_bytes(got: torch.Tensor, expected: torch.Tensor) -> None:
    got, expected = got.view(torch.uint8), expected.view(torch.uint8)
    assert got.shape == expected.shape
    mismatch = got != expected
    assert not mismatch.any(), f"{int(mismatch.sum())} bytes differ, first at {mismatch.nonzero()[0].tolist()}"


@pytest.mark.parametrize("pages, tokens, nope, rope, dtype", sizes(
    cpu=[(3, 37, 512, 64, torch.bfloat16), (2, 9, 256, 64, torch.float32), (2, 5, 384, 16, torch.bfloat16),
         (1, 1, 128, 64, torch.float32)],
    gpu=[(4096, 8192, 512, 64, torch.bfloat16), (512, 333, 512, 64, torch.float32), (64, 1, 512, 64, torch.bfloat16)],
))
def test_fp8_latent_write_matches_reference(pages, tokens, nope, rope, dtype):
    from dayzero.plugins.paged_cache.kernel import write_fp8_latent_launcher

    cache = garbage_cache(F.latent_cache_shape(pages, nope, rope, True), torch.uint8)
    rows, slots = wide_rows(tokens, nope + rope, dtype), scattered_slots(pages, tokens)
    expected = cache.clone()
    F.write_latent(expected, rows, slots, rope)
    write_fp8_latent_launcher(cache, rows, slots, rope)
    assert_same_bytes(cache, expected)


@pytest.mark.parametrize("pages, tokens, dim, dtype", sizes(
    cpu=[(3, 37, 128, torch.bfloat16), (2, 11, 96, torch.float32), (1, 1, 128, torch.float32)],
    gpu=[(4096, 8192, 128, torch.bfloat16), (512, 333, 128, torch.float32), (64, 1, 128, torch.bfloat16)],
))
def test_mxfp8_index_write_matches_reference(pages, tokens, dim, dtype):
    from dayzero.plugins.paged_cache.kernel import write_mxfp8_index_launcher

    cache = garbage_cache(F.index_cache_shape(pages, dim, True), torch.uint8)
    keys, slots = wide_rows(tokens, dim, dtype), scattered_slots(pages, tokens)
    expected = cache.clone()
    F.write_index_keys(expected, keys, slots)
    write_mxfp8_index_launcher(cache, keys, slots)
    assert_same_bytes(cache, expected)


@pytest.mark.parametrize("pages, tokens, dim, rows_dtype, cache_dtype", sizes(
    cpu=[(3, 21, 576, torch.float32, torch.bfloat16), (2, 9, 128, torch.bfloat16, torch.float32)],
    gpu=[(4096, 8192, 576, torch.float32, torch.bfloat16), (512, 333, 128, torch.bfloat16, torch.bfloat16)],
))
def test_plain_write_rounds_like_torch(pages, tokens, dim, rows_dtype, cache_dtype):
    """fp32 rows into a bf16 cache round to nearest even, as the reference's .to(bfloat16)."""
    from dayzero.plugins.paged_cache.kernel import write_rows_launcher

    cache = garbage_cache((pages, 64, dim), cache_dtype)
    rows, slots = wide_rows(tokens, dim, rows_dtype), scattered_slots(pages, tokens)
    expected = cache.clone()
    F.write_latent(expected, rows, slots, 64)
    write_rows_launcher(cache, rows, slots)
    assert_same_bytes(cache, expected)


def test_slots_of_one_page_and_int32_slot_mapping():
    """All tokens of one page, in a shuffled order, with an int32 slot_mapping: the page-major index layout has
    no gaps and no overlaps."""
    from dayzero.plugins.paged_cache.kernel import write_mxfp8_index_launcher

    cache = garbage_cache(F.index_cache_shape(3, 128, True), torch.uint8)
    keys = wide_rows(64, 128, torch.float32)
    slots = (64 + torch.randperm(64)).to(torch.int32).to(DEVICE)
    untouched = cache[[0, 2]].clone()
    expected = cache.clone()
    F.write_index_keys(expected, keys, slots)
    write_mxfp8_index_launcher(cache, keys, slots)
    assert_same_bytes(cache, expected)
    assert torch.equal(cache[[0, 2]], untouched)


CASES = {
    "latent-fp8": (lambda: F.latent_cache_shape(3, 512, 64, True), torch.uint8, 576),
    "latent-bf16": (lambda: F.latent_cache_shape(3, 512, 64, False), torch.bfloat16, 576),
    "index-mxfp8": (lambda: F.index_cache_shape(3, 128, True), torch.uint8, 128),
    "index-fp32": (lambda: F.index_cache_shape(3, 128, False), torch.float32, 128),
}


@pytest.mark.parametrize("case", CASES)
def test_registered_ops_pick_the_format_by_cache_dtype(case):
    """paged_cache.write_latent / write_index_keys (the op: reference on CPU, kernels on CUDA) and the ops' kernel
    bodies run directly (the interpreter runs them on the CPU) all equal formats.py's writes."""
    from dayzero.plugins import paged_cache

    shape, cache_dtype, width = CASES[case]
    latent = case.startswith("latent")
    op, reference = (paged_cache.write_latent, F.write_latent) if latent else (
        paged_cache.write_index_keys, F.write_index_keys)
    extra = (64,) if latent else ()
    cache = garbage_cache(shape(), cache_dtype)
    rows, slots = wide_rows(13, width, torch.bfloat16), scattered_slots(3, 13)
    expected = cache.clone()
    reference(expected, rows, slots, *extra)
    # _init_fn is the triton_op's CUDA implementation
    for run in (op, op._init_fn):
        got = cache.clone()
        run(got, rows, slots, *extra)
        assert_same_bytes(got, expected)


def test_write_ops_pass_opcheck_and_export_in_place():
    from dayzero.plugins import paged_cache

    cache = torch.zeros(F.latent_cache_shape(2, 512, 64, True), dtype=torch.uint8)
    args = (cache, torch.randn(3, 576), torch.tensor([1, -1, 100]), 64)
    torch.library.opcheck(paged_cache.write_latent, args, test_utils=("test_schema", "test_faketensor"))
    index = torch.zeros(F.index_cache_shape(2, 128, True), dtype=torch.uint8)
    torch.library.opcheck(paged_cache.write_index_keys, (index, torch.randn(3, 128), torch.tensor([1, -1, 100])),
                          test_utils=("test_schema", "test_faketensor"))

    class Step(torch.nn.Module):
        def forward(self, cache, rows, slots):
            paged_cache.write_latent(cache, rows, slots, 64)
            return rows.sum()

    tokens = torch.export.Dim("tokens", min=2, max=4096)
    program = torch.export.export(Step(), args[:3], dynamic_shapes=({}, {0: tokens}, {0: tokens}))
    assert "torch.ops.dayzero.write_latent.default](args = (%cache," in str(program.graph)
    assert list(program.run_decompositions().graph_signature.user_inputs_to_mutate.values()) == ["cache"]


def test_onnx_translation_of_a_cache_write():
    """torch.export hands a mutating op on in functional form (cache in, updated cache out); the translation
    emits that as one dayzero node. A functional stand-in op carries it through torch.onnx.export here."""
    pytest.importorskip("onnxscript")
    from dayzero.plugins import paged_cache
    from dayzero.plugins.registry import ONNX_TRANSLATIONS

    @torch.library.custom_op("dayzero_test::write_latent_out", mutates_args=())
    def write_latent_out(cache: torch.Tensor, rows: torch.Tensor, slots: torch.Tensor, rope_dim: int) -> torch.Tensor:
        out = cache.clone()
        F.write_latent(out, rows, slots, rope_dim)
        return out

    write_latent_out.register_fake(lambda cache, rows, slots, rope_dim: torch.empty_like(cache))

    class Step(torch.nn.Module):
        def forward(self, cache, rows, slots):
            return torch.ops.dayzero_test.write_latent_out(cache, rows, slots, 64)

    translation = ONNX_TRANSLATIONS[torch.ops.dayzero.write_latent.default]
    assert paged_cache.write_latent._opoverload in ONNX_TRANSLATIONS
    cache = torch.zeros(F.latent_cache_shape(2, 512, 64, True), dtype=torch.uint8)
    program = torch.onnx.export(Step(), (cache, torch.randn(3, 576), torch.tensor([1, -1, 100])), dynamo=True,
                                custom_translation_table={torch.ops.dayzero_test.write_latent_out.default: translation})
    (node,) = [n for n in program.model.graph if n.domain == "dayzero"]
    assert node.op_type == "WriteLatent" and node.attributes["rope_dim"].value == 64
    assert [v.name for v in node.inputs] == ["cache", "rows", "slots"] and len(node.outputs) == 1
