#!/usr/bin/env bash
# Written in the thirteenth session of 2026-12-05, not run (no machine was lent after run oe). Run it after
# `git revert --no-edit 508e859`, which brings back the candidate commit 9467bf6:
# * the Gluon decode resolves its rows itself (the token's sequence from cu_seqlens, each block's physical rows from
#   its indices and the block table, a block ahead of the gather), where a resolve kernel and a token-to-sequence
#   search ran before it (run od: about 10 of the 73 us of kernels at B64 H64 BF16, with their small ops);
# * the Triton kernel's e4m3 placement in three instructions a pair (the Gluon decode's default since run od).
# On main already, a bench candidate either way: the split combine inside the Gluon kernel (`fused_combine`, config
# gluon-fused-combine; run od: the combine kernel 5.2 us of the H64 call).
# 1. the sparse MLA GPU tests (Gluon with and without the fused combine, Triton, FP8 decodes);
# 2. the decode's kernels one by one (bench/sparse_mla_decode_kernels.py, then with --fused-combine) and the quick
#    decode bench with --gluon (configs gluon, gluon-fused-combine);
# 3. every GPU test, for the seconds left.
# usage: bash bench/run_h200_of.sh [SECONDS] (default 480).
. bench/h200.sh
. bench/h200_call.sh of ${1:-480}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 120 python3 -m pytest -q -rfE -p no:cacheprovider -n 8 -m gpu tests/plugins/test_sparse_mla_gluon.py \
  tests/plugins/test_sparse_mla_fp8_decode.py tests/plugins/test_sparse_mla_kernel.py > $R/gpu_sparse_mla.log 2>&1
echo "== sparse mla gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_sparse_mla.log; save
timeout 60 python3 bench/sparse_mla_decode_kernels.py > $R/decode_kernels.log 2>&1
timeout 60 python3 bench/sparse_mla_decode_kernels.py --fused-combine >> $R/decode_kernels.log 2>&1
echo "== decode kernels rc=$? at $(( $(date +%s) - start )) s"; save
timeout 100 python3 bench/bench_sparse_mla.py --quick-decode --gluon --out $R/mla_gluon > $R/mla_gluon.log 2>&1
echo "== sparse mla --gluon rc=$? at $(( $(date +%s) - start )) s"; save
timeout -s INT -k 15 $(left) python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_all.log; save
decode_kernel_rows
sparse_mla_rows $R/mla_gluon/sparse_mla.json 2>/dev/null | grep -E "default|gluon" | cut -c1-160
