#!/usr/bin/env bash
# One device call: the H200 export (AOTInductor, 2-layer h200-slice; cores 0-9, background) beside the KDA chunk
# GPU tests + bench, the 32K TTFT (after a warm-up prefill) and the MoE / quant GPU tests (cores 10-15).
# Everything runs on the committed tree carried in `.snap/head`; the export on a copy with `.snap/kda_old` laid over
# (the last H200-checked KDA kernels), and so does the TTFT when the new KDA GPU tests fail. Results in
# $OUT/results_f.tgz.
# usage: bash bench/run_h200_f.sh [SECONDS]: every slot is scaled to fit SECONDS (default 540) of device time.
. bench/h200.sh
T=${1:-540}; slot() { echo $(( $1 * T / 540 )); }
R=/tmp/results; mkdir -p $R
# committed code only (.snap/head: `git archive HEAD`, carried), never the work in progress beside it
rm -rf /tmp/head /tmp/base; cp -r .snap/head /tmp/head; cp -r .snap/head /tmp/base; cp -r .snap/kda_old/. /tmp/base/
cd /tmp/head; export PYTHONPATH=/tmp/site:/tmp/head
base() { (cd /tmp/base && PYTHONPATH=/tmp/site:/tmp/base "$@"); }
save() { tar czf $OUT/results_f.tgz -C $R . 2>/dev/null; }
(base taskset -c 0-9 timeout $(slot 500) python3 bench/h200_export.py --out $R > $R/h200_export.log 2>&1; echo "rc=$?" >> $R/h200_export.log) &
export_pid=$!
fg() { taskset -c 10-15 "$@"; }
fg timeout $(slot 120) python3 -m pytest -q -rf -p no:cacheprovider -m gpu tests/plugins/test_kda_chunk_kernel.py > $R/gpu_kda.log 2>&1
kda_rc=$?; echo "== kda gpu tests rc=$kda_rc"; save
fg timeout $(slot 140) python3 bench/bench_kda_prefill.py --quick --out $R > $R/bench_kda_prefill.log 2>&1; echo "== kda bench rc=$?"; save
if [ $kda_rc = 0 ]; then where=""; else where=base; fi
$where fg timeout $(slot 110) python3 bench/bench_runtime.py --ttft-only --out $R > $R/bench_runtime_ttft.log 2>&1; echo "== ttft ($where) rc=$?"; save
fg timeout $(slot 80) python3 -m pytest -q -rf -p no:cacheprovider -m gpu tests/plugins/test_moe_kernel.py tests/plugins/test_quant_kernel.py > $R/gpu_moe_quant.log 2>&1
echo "== moe/quant gpu tests rc=$?"; save
wait $export_pid; save
echo "== kda tests"; grep -E "passed|failed|FAILED|rror" $R/gpu_kda.log | cut -c1-160 | tail -6
echo "== kda bench"; grep -v "^W1202\|^  \|^{\|Warn" $R/bench_kda_prefill.log | tail -14 | cut -c1-200
echo "== ttft"; tail -2 $R/bench_runtime_ttft.log | cut -c1-300
echo "== moe/quant tests"; grep -E "passed|failed|FAILED|rror" $R/gpu_moe_quant.log | cut -c1-160 | tail -6
echo "== export"; grep -v "^W1202\|^  \|Warning" $R/h200_export.log | tail -18 | cut -c1-220
