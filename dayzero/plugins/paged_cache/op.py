"""`torch.ops.dayzero.write_rows`: scatter new rows into a paged cache in place."""

from __future__ import annotations

import torch

from dayzero.plugins.paged_cache import reference
from dayzero.plugins.registry import HAS_TRITON, plugin_op


def _cpu(cache: torch.Tensor, rows: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    reference.write_rows(cache, rows, slot_mapping)


def _fake(cache: torch.Tensor, rows: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    return None


@plugin_op("write_rows", cpu=_cpu, fake=_fake, mutates_args=("cache",))
def write_rows(cache: torch.Tensor, rows: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    from torch.library import wrap_triton

    from dayzero.plugins.paged_cache.kernel import write_rows_launcher

    write_rows_launcher(cache, rows.reshape(rows.shape[0], -1).contiguous(), slot_mapping, launch=wrap_triton)


__all__ = ["write_rows", "HAS_TRITON"]
