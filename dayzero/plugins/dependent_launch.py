"""Programmatic dependent launch (PDL, Hopper and newer) for the kernels a decode step runs back to back.

A CUDA graph still starts each kernel only after the one before it has drained: its launch, its programs' start and
the last wave of the kernel before do not overlap. Launched with PDL, a kernel's programs may start while the kernel
before finishes; each one first waits (`griddepcontrol.wait`) until that kernel has completed and its writes are
visible, then lets the next kernel start the same way. Results are those of a plain launch; only the gap goes.

A kernel takes a `PDL` constexpr and calls `wait_for_previous_kernel(PDL)` before its first global access; its
launcher passes `**launch_options(pdl)`, so the two always go together (a PDL launch of a kernel that does not wait
would read its inputs before they are written). PDL is a mode: OFF, or EARLY: the next kernel may start once every
program of this one has started (it waits at its own first access). PDL stays off under the Triton interpreter, while
tracing (exported engines: AOTInductor launches kernels without launch attributes) and where DAYZERO_PDL=0.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from torch._subclasses.fake_tensor import is_fake
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from dayzero.plugins import device as device_info
from dayzero.plugins.triton_utils import INTERPRETED

ENV = "DAYZERO_PDL"
MIN_CAPABILITY = (9, 0)
OFF, EARLY = 0, 1


def pdl_mode(like: torch.Tensor, latency_bound) -> int:
    """The default mode of a kernel launched now on `like`'s device: EARLY where the call is latency-bound (a few
    programs, microseconds), else OFF (see the module docstring for where PDL is never taken). `latency_bound` is
    looked at only where PDL is available, never while tracing: a symbolic size's comparison would become a guard."""
    if not pdl_available(like):
        return OFF
    return EARLY if latency_bound else OFF


def pdl_available(like: torch.Tensor) -> bool:
    if bool(INTERPRETED) or os.environ.get(ENV, "1") == "0" or not device_info.on_gpu(like.device):
        return False
    if is_fake(like) or torch.compiler.is_compiling():
        return False
    return device_info.gpu_capability(like.device) >= MIN_CAPABILITY


def launch_options(pdl: int) -> dict:
    """Launch keywords for a kernel whose `PDL` constexpr is `pdl`."""
    return {"launch_pdl": True} if pdl != OFF else {}


@triton.jit
def wait_for_previous_kernel(PDL: tl.constexpr):
    """Under PDL: wait until the kernel before has finished and its writes are visible, then let the next kernel's
    programs start (they wait in turn). Without PDL, nothing."""
    if PDL != 0:
        gdc_wait()
        gdc_launch_dependents()
