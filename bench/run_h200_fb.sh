#!/usr/bin/env bash
# Second device call of 2026-12-04's fifth session: the prefetching one-token pool step (prefetch_pool_kernel.py):
# its GPU tests with the other KDA recurrent tests, then bench_kda_decode.py --prefetch (the default one-tile kernel
# against the prefetching step at 3-8 programs an SM, on 16-wide blocks with one warp and 32-wide with two).
# usage: bash bench/run_h200_fb.sh [SECONDS] (default 300), at commit 3e2719b (the kernel and --prefetch were taken
# back after this run, commit 5b56cc3).
. bench/h200.sh
. bench/h200_call.sh fb ${1:-300}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 150 python3 -m pytest -q -rfE -p no:cacheprovider -n 8 -m gpu tests/plugins/test_kda_recurrent_kernel.py > $R/gpu_kda.log 2>&1
echo "== gpu kda tests rc=$? at $(( $(date +%s) - start )) s"; save
timeout $(( $(left) - 5 )) python3 bench/bench_kda_decode.py --prefetch --out $R > $R/kda_prefetch.log 2>&1
echo "== prefetch rc=$? at $(( $(date +%s) - start )) s"; save
save_caches
test_summary $R/gpu_kda.log
grep -E "^B(1|64|256) " $R/kda_prefetch.log | cut -c1-130
