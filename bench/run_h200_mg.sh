#!/usr/bin/env bash
# Ninth session of 2026-12-04, seventh call: a smoke run of the benches after their graph helpers moved into
# bench/common.py (captured_graph, profiled_kernel_us): kernel_ms on a copy, bench_kda_sustained.py and
# bench_kda_decode.py at B64 H32.
# usage: bash bench/run_h200_mg.sh [SECONDS] (default 150).
. bench/h200.sh
. bench/h200_call.sh mg ${1:-150}
export OMP_NUM_THREADS=1
python3 -c "
import torch
from bench.common import kernel_ms, replay_kernel_ms
x = torch.randn(2**26, device='cuda'); y = torch.empty_like(x)
call = lambda: torch.add(x, 0, out=y)
print('copy 512 MiB: kernel_ms', round(kernel_ms([call]) * 1e3, 1), 'us; replays', [round(t * 1e3, 1) for t in replay_kernel_ms([call])])
" 2>&1 | tail -2
timeout 50 python3 bench/bench_kda_sustained.py --case 64x32 --slot-order random --calls 100 --out $R/sustained \
  > $R/sustained.log 2>&1
echo "== sustained rc=$? at $(( $(date +%s) - start )) s"; save
timeout 60 python3 bench/bench_kda_decode.py --quick --cases 64x32 --slot-order random --out $R/decode \
  > $R/decode.log 2>&1
echo "== kda decode rc=$? at $(( $(date +%s) - start )) s"; save
grep median $R/sustained.log | cut -c1-110
tail -n 6 $R/decode.log | grep -v "^ *$" | cut -c1-200
