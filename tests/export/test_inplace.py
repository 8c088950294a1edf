"""The in-place cache check: it lets plugin-op and row-scatter writes through, catches whole-cache writes in the
exported graph, and reads AOTInductor's generated wrapper (a whole-cache copy there is caught too)."""

from __future__ import annotations

import zipfile

import pytest
import torch

from dayzero.errors import DayzeroError
from dayzero.export.aoti import FIRST_CACHE, compile_package
from dayzero.export.inplace import cache_writes, whole_cache_writes, wrapper_cache_copies
from dayzero.export.trace import trace_step
from dayzero.model.caches import CacheFormat
from dayzero.model.eager_engine import eager_manifest
from tests.helpers import random_model, tiny_config_dict


class RowsAndWhole(torch.nn.Module):
    """A row scatter into one cache (allowed) and a pointwise pass over a view of another (a whole-cache write)."""

    def forward(self, x, idx, scattered, scaled):
        scattered.index_copy_(0, idx, x)
        scaled.view(-1).mul_(2.0)
        return x.sum(-1) + scattered[0].sum()


class CopiedBack(torch.nn.Module):
    """A functional update copied over the whole cache."""

    def forward(self, x, idx, cache):
        cache.copy_(cache.index_copy(0, idx, x) + 1.0)
        return x.sum(-1)


def _example(num_caches: int):
    return (torch.randn(3, 8), torch.tensor([0, 2, 4]), *(torch.zeros(6, 8) for _ in range(num_caches)))


def test_graph_check_flags_only_whole_cache_writes():
    program = torch.export.export(RowsAndWhole(), _example(2), strict=False)
    assert cache_writes(program, 2) == [("aten.index_copy_", "scattered"), ("aten.mul_.Tensor", "scaled")]
    assert whole_cache_writes(program, 2) == ["aten.mul_.Tensor -> scaled"]
    copied = torch.export.export(CopiedBack(), _example(1), strict=False)
    assert whole_cache_writes(copied, 2) == ["aten.copy_ -> cache"]


@pytest.mark.parametrize("decode", [False, True], ids=["prefill", "decode"])
def test_model_steps_write_every_cache_only_through_rows(decode):
    model = random_model(tiny_config_dict())
    manifest = eager_manifest(model, CacheFormat(), max_batch=4, max_len=256, num_draft=1)
    program = trace_step(model, manifest, decode)
    writes = cache_writes(program, FIRST_CACHE)
    assert len({cache for _, cache in writes}) == len(manifest.cache_tensors)
    assert whole_cache_writes(program, FIRST_CACHE) == []


def test_compile_refuses_a_whole_cache_write(tmp_path):
    program = torch.export.export(RowsAndWhole(), _example(2), strict=False)
    with pytest.raises(DayzeroError, match="writes whole caches"):
        compile_package(program, tmp_path / "toy.pt2", "cpu", first_cache=2)


def test_wrapper_check_reads_the_generated_bindings(tmp_path):
    program = torch.export.export(RowsAndWhole(), _example(2), strict=False)
    path = torch._inductor.aoti_compile_and_package(program, package_path=str(tmp_path / "toy.pt2"))
    with zipfile.ZipFile(path) as archive:
        source = next(archive.read(n).decode() for n in archive.namelist() if n.endswith(".wrapper.cpp"))
    assert "auto arg2_1 = std::move(inputs[2]);" in source
    assert wrapper_cache_copies(source, 2) == []
    copy_line = "    AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_copy_(arg3_1, buf0, 0));"
    assert wrapper_cache_copies(source + "\n" + copy_line, 2) == [copy_line.strip()]
    assert wrapper_cache_copies(source + "\n" + copy_line.replace("arg3_1", "buf7"), 2) == []


def test_wrapper_check_lets_the_alignment_guard_pass():
    guard = ("    if ((reinterpret_cast<std::uintptr_t>(arg9_1.data_ptr()) & (16 -1)) != 0) {\n"
             "        aoti_torch_clone_preserve_strides(arg9_1, &arg9_1_aligned);\n    }")
    source = "auto arg9_1 = std::move(inputs[9]);\n" + guard
    assert wrapper_cache_copies(source, 2) == []
    clone = "    aoti_torch_clone_preserve_strides(arg9_1, &buf3);"
    assert wrapper_cache_copies(source + "\n" + clone, 2) == [clone.strip()]
