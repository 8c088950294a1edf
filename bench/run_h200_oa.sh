#!/usr/bin/env bash
# Twelfth session of 2026-12-05: the Gluon sparse MLA decode over an FP8 cache (gluon_decode_kernel.py: e4m3 bytes
# gathered two deep, decoded by bit placement into one bf16 key buffer) and the Gluon decode as the op's default on
# Hopper (BF16 and FP8 caches; DAYZERO_SPARSE_MLA_GLUON=0 turns it off).
# 1. offline sm_90 build (registers, spills, shared memory, the key loop's op order);
# 2. every GPU test (the op's decode now takes the Gluon kernel: model, runtime and export tests run through it);
# 3. shared-memory race check of one small FP8 case;
# 4. the quick decode bench (B64, H128 / H64, FP8 / BF16, 32K context, top-2048) with --gluon.
# usage: bash bench/run_h200_oa.sh [SECONDS] (default 420).
. bench/h200.sh
. bench/h200_call.sh oa ${1:-420}
export OMP_NUM_THREADS=1
timeout 120 python3 bench/sparse_mla_gluon_offline.py --out $R/ir > $R/offline.log 2>&1
echo "== offline build rc=$? at $(( $(date +%s) - start )) s"; grep FP8 $R/offline.log | cut -c1-300; save
timeout -s INT -k 15 220 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_all.log; save
gluon_racecheck "fp8 and (B1-H128 or splits_and_blank_tokens and 40)"
gluon_decode_bench
