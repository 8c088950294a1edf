"""One call each of our KDA chunk prefill and fla's `chunk_kda` at B8 T4096 H96 inside a profiler range, for Nsight
Compute: why our WY kernel moves its bytes at ~2.3 TB/s where fla's recompute_w_u moves its own at ~3.7 (bench/
README.md, runs ab / ac). Both are warmed up (compiled, fla autotuned) before the range opens.

    ncu --clock-control none --profile-from-start off -k regex:"wy_kernel|recompute_w_u" \
        --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        --section MemoryWorkloadAnalysis python3 bench/profile_kda_wy.py
"""

from __future__ import annotations

import torch

from bench.bench_kda_prefill import fla_chunk, make_inputs, ours


def main() -> None:
    B, T, H = 8, 4096, 96
    q, k, v, g, beta, cu = make_inputs(B, T, H)
    with torch.inference_mode():
        for _ in range(2):
            ours(q, k, v, g, beta, cu, None)
            fla_chunk(q, k, v, g, beta, cu, B, T)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        ours(q, k, v, g, beta, cu, None)
        fla_chunk(q, k, v, g, beta, cu, B, T)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    print("profiled: ours and fla chunk_kda at", f"B{B} T{T} H{H}")


if __name__ == "__main__":
    main()
