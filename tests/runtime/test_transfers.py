"""The step's one-copy transfers: uploaded columns come back whole and 16-byte aligned (compiled engines specialize on
aligned inputs); a download returns integer and float32 tensors exactly."""

from __future__ import annotations

import pytest
import torch

from dayzero.runtime.transfers import ALIGN_BYTES, Download, download, upload


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float32])
def test_uploaded_columns_are_whole_and_aligned(dtype):
    columns = {"a": [3, -1, 7], "empty": [], "b": list(range(17)), "c": [5]}
    out = upload(columns, dtype, torch.device("cpu"))
    for name, values in columns.items():
        assert out[name].dtype == dtype and out[name].tolist() == values
        assert out[name].data_ptr() % ALIGN_BYTES == 0


def test_a_download_returns_integers_and_floats_exactly():
    tensors = [torch.tensor([[1, 2**31 - 1], [-5, 0]]), torch.tensor([0.1, -3.5e-20, float("inf")]),
               torch.zeros(0, 3, dtype=torch.int32)]
    host = Download(tensors).wait()
    assert [t.dtype for t in host] == [torch.int64, torch.float32, torch.int64]
    for got, sent in zip(host, tensors):
        assert got.shape == sent.shape and torch.equal(got, sent.to(got.dtype))
    assert download([]) == []


@pytest.mark.gpu
def test_a_download_from_the_gpu_lands_after_its_kernels():
    x = torch.randn(4096, 4096, device="cuda")
    tokens = (x @ x).argmax(-1)
    copy = Download([tokens])
    assert torch.equal(copy.wait()[0], tokens.cpu())
