#!/usr/bin/env bash
# One device call to name the kernel of the AOTI decode step's illegal memory access: the H200 decode package built
# with AOTInductor's kernel-name printer compiled in, then one step of it (bench/aoti_decode_probe.py, random caches)
# with synchronous launches and input checks: the last kernel name printed is the faulting one.
# usage: bash bench/run_h200_k.sh. Results in $OUT/results_k.tgz.
. bench/h200.sh
R=/tmp/results; mkdir -p $R
rm -rf /tmp/head; cp -r .snap/head /tmp/head; cd /tmp/head; export PYTHONPATH=/tmp/site:/tmp/head
AOT_INDUCTOR_DEBUG_INTERMEDIATE_VALUE_PRINTER=3 timeout 260 python3 bench/h200_export.py --build-only --out $R \
  > $R/build.log 2>&1; echo "== build rc=$?"
cp /tmp/dayzero_export/decode.pt2 $R/ 2>/dev/null
CUDA_LAUNCH_BLOCKING=1 AOTI_RUNTIME_CHECK_INPUTS=1 timeout 100 python3 bench/aoti_decode_probe.py > $R/probe.log 2>&1
echo "== probe rc=$?"
tar czf $OUT/results_k.tgz -C $R .
grep -v "^W12\|Warn\|warn" $R/build.log | tail -3 | cut -c1-200
grep -v "^W12\|Warn\|warn" $R/probe.log | tail -14 | cut -c1-200
