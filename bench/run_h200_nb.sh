#!/usr/bin/env bash
# Eleventh session of 2026-12-04 (no device machine; written for the next one): the Gluon BF16 sparse MLA decode
# (dayzero/plugins/sparse_mla/gluon_decode_kernel.py, opt-in DAYZERO_SPARSE_MLA_GLUON=1), never run on a GPU yet.
# 1. its offline sm_90 build on the device's Triton (registers, spills, shared memory, the key loop's op order);
# 2. its GPU tests against the reference, then the Triton kernel's sparse MLA tests (the op's routing changed);
# 3. shared-memory race check of one small case (compute-sanitizer racecheck, where installed);
# 4. (also) the FP8 prefill through a BF16 copy of the pages: its GPU tests and the T 32K prefill bench;
# 5. the quick decode bench (B64, H128 / H64, FP8 / BF16, 32K context, top-2048) without and with --gluon: the
#    Gluon kernel is timed beside the BF16 default (today 0.175 / 0.107 ms at H128 / H64), as config "gluon" (half the
#    score block a warpgroup, the README's design) and "gluon-full-scores" (all of it, fewer barriers).
# usage: bash bench/run_h200_nb.sh [SECONDS] (default 560).
. bench/h200.sh
. bench/h200_call.sh nb ${1:-560}
export OMP_NUM_THREADS=1
timeout 120 python3 bench/sparse_mla_gluon_offline.py --out $R/ir > $R/offline.log 2>&1
echo "== offline build rc=$? at $(( $(date +%s) - start )) s"; cut -c1-400 $R/offline.log | tail -n 6; save
timeout -s INT -k 15 200 python3 -m pytest -q -rfE -p no:cacheprovider -n 8 -m gpu \
  tests/plugins/test_sparse_mla_gluon.py tests/plugins/test_sparse_mla_kernel.py \
  tests/plugins/test_sparse_mla_fp8_prefill.py > $R/gpu_mla.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_mla.log; save
if command -v compute-sanitizer >/dev/null 2>&1; then
  timeout -s INT -k 15 120 compute-sanitizer --tool racecheck --print-limit 20 python3 -m pytest -q -p no:cacheprovider \
    -m gpu tests/plugins/test_sparse_mla_gluon.py -k "B1-H128 or splits_and_blank_tokens and 40" > $R/racecheck.log 2>&1
  echo "== racecheck rc=$? at $(( $(date +%s) - start )) s"; grep -E "RACECHECK SUMMARY|hazard|passed|failed" \
    $R/racecheck.log | head -8 | cut -c1-200; save
fi
timeout 150 python3 bench/bench_sparse_mla.py --quick-decode --out $R/mla > $R/mla.log 2>&1
echo "== sparse mla rc=$? at $(( $(date +%s) - start )) s"; save
timeout 150 python3 bench/bench_sparse_mla.py --quick-decode --gluon --out $R/mla_gluon > $R/mla_gluon.log 2>&1
echo "== sparse mla --gluon rc=$? at $(( $(date +%s) - start )) s"; save
# FP8 prefill through a BF16 copy of the pages read (fp8_prefill.py, the op's eager prefill path): T 32K H128,
# config "fp8-via-bf16-copy" against the FP8 kernel (218 TFLOP/s in run bf) and the BF16 cache (270)
timeout $(left) python3 bench/bench_sparse_mla.py --prefill-only --no-sweep --out $R/prefill > $R/prefill.log 2>&1
echo "== sparse mla prefill rc=$? at $(( $(date +%s) - start )) s"; save
save_caches
sparse_mla_rows $R/prefill/sparse_mla.json 2>/dev/null | grep "prefill T32768 H128 fp8" | cut -c1-160
sparse_mla_rows $R/mla/sparse_mla.json 2>/dev/null | grep bf16 | cut -c1-160
echo "-- with --gluon"
sparse_mla_rows $R/mla_gluon/sparse_mla.json 2>/dev/null | grep bf16 | cut -c1-160
