"""Where a Gluon sparse MLA decode call's GPU time goes, kernel by kernel (CUPTI, inside a CUDA graph as the engine
replays it): the attention kernel, the split combine and the index resolution, B64 over a 32K context, top-2048.

    PYTHONPATH=. python bench/sparse_mla_decode_kernels.py [--options '{"row_scan": 256}']

At H64 a token's keys run in two splits (64 programs on 132 SMs), so every call also writes fp32 partial outputs
(2 x 64 x 64 x 512 x 4 B = 16.8 MB) and combines them in a second kernel; this prints what that costs.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from bench import bench_sparse_mla as sparse_mla
from bench.common import captured_graph
from bench.profile_missed_targets import sparse_mla_decode_inputs

REPLAYS = 20


def kernel_us(call) -> dict[str, float]:
    """Median GPU us per kernel name over REPLAYS graph replays of one call."""
    graph = captured_graph([call], warm=[call, call])
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(REPLAYS):
            graph.replay()
        torch.cuda.synchronize()
    times = defaultdict(list)
    for event in prof.events():
        if event.device_type == DeviceType.CUDA:
            times[event.name[:60]].append(event.time_range.elapsed_us())
    return {name: sorted(us)[len(us) // 2] for name, us in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--options", type=json.loads, default={}, help="the Gluon launcher's options, as JSON")
    options = parser.parse_args().options
    torch.manual_seed(0)
    with torch.inference_mode():
        for heads in (64, 128):
            for fmt in ("bf16", "fp8"):
                inputs = sparse_mla_decode_inputs(fmt, heads)
                per_kernel = kernel_us(lambda inputs=inputs: sparse_mla.sparse_mla_decode_gluon_launcher(
                    *inputs, sparse_mla.SM_SCALE, sparse_mla.NOPE, **options))
                total = sum(per_kernel.values())
                rows = ", ".join(f"{name} {us:.1f}" for name, us in per_kernel.items())
                print(f"B64 H{heads} {fmt} {options}: {total:.1f} us in kernels: {rows}")


if __name__ == "__main__":
    main()
