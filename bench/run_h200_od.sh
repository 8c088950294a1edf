#!/usr/bin/env bash
# Twelfth session of 2026-12-05 (written after its device time ran out; for the next session): the overlapped Gluon
# BF16 decode (gluon_overlap_kernel.py: 32-key blocks in a four-slot ring, block i + 1's scores computed during block
# i's softmax; a bench candidate, not routed by the op), never run on a GPU yet, and (thirteenth session) the FP8
# decode's three-instruction e4m3 placement (`short_placement`, the commit c7297db had tried as the default) and the
# overlapped loop over FP8 records (`_sparse_mla_overlap_fp8_kernel`: block i + 2 decoded during the wgmmas).
# 1. offline sm_90 build of every Gluon variant (registers, spills, shared memory, key-loop op order);
# 2. the Gluon GPU tests (both candidates against the reference: 6 shapes, 4 split counts);
# 3. shared-memory race check of one small case of each overlapped loop (the new synchronization);
# 4. the decode's kernels one by one (bench/sparse_mla_decode_kernels.py), then the quick decode bench with --gluon: config "gluon-overlap" beside "gluon" (run oa: 0.118 / 0.077 ms at H128 /
#    H64 BF16) and configs "gluon-short-placement", "gluon-overlap" beside "gluon" over FP8 (run oa: 0.165 / 0.098 ms).
# usage: bash bench/run_h200_od.sh [SECONDS] (default 420). Ran as run od at commit 725933e; commit 20e57db then
# removed the overlapped loops and the placement option it times, so it runs as written at 725933e only.
. bench/h200.sh
. bench/h200_call.sh od ${1:-420}
export OMP_NUM_THREADS=1
timeout 120 python3 bench/sparse_mla_gluon_offline.py --out $R/ir > $R/offline.log 2>&1
echo "== offline build rc=$? at $(( $(date +%s) - start )) s"; grep -E "overlap|short" $R/offline.log | cut -c1-300; save
timeout -s INT -k 15 150 python3 -m pytest -q -rfE -p no:cacheprovider -n 8 -m gpu tests/plugins/test_sparse_mla_gluon.py \
  > $R/gpu_gluon.log 2>&1
echo "== gpu tests rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_gluon.log; save
gluon_racecheck "overlap and B1-H128"
# where the default and the overlapped decode's GPU time goes, kernel by kernel (the H64 split combine's share)
timeout 60 python3 bench/sparse_mla_decode_kernels.py > $R/decode_kernels.log 2>&1
timeout 60 python3 bench/sparse_mla_decode_kernels.py --overlap >> $R/decode_kernels.log 2>&1
echo "== decode kernels rc=$? at $(( $(date +%s) - start )) s"; save; grep B64 $R/decode_kernels.log | cut -c1-240
gluon_decode_bench
