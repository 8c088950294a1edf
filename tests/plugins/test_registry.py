"""Plugin ops register without Triton too (a CPU-only install): the reference then serves every device, under the
typed signature of the CUDA implementation."""

from __future__ import annotations

import torch

from dayzero.plugins import registry


def _twice_cpu(x, factor):
    return x * 2 * factor


def _twice_fake(x, factor):
    return torch.empty_like(x)


def test_an_op_registers_and_runs_without_triton(monkeypatch):
    monkeypatch.setattr(registry, "HAS_TRITON", False)
    monkeypatch.setattr(registry, "PLUGIN_OPS", {})

    @registry.plugin_op("test_twice_without_triton", cpu=_twice_cpu, fake=_twice_fake)
    def twice(x: torch.Tensor, factor: float) -> torch.Tensor:
        raise AssertionError("the CUDA body never runs on the CPU")

    x = torch.randn(3, 5)
    assert torch.equal(twice(x, 1.5), x * 3)
    assert str(torch.ops.dayzero.test_twice_without_triton.default._schema) == (
        "dayzero::test_twice_without_triton(Tensor x, float factor) -> Tensor")
    assert registry.PLUGIN_OPS == {"test_twice_without_triton": twice}
