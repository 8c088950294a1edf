#!/usr/bin/env bash
# Sixth session of 2026-12-04, seventh call: indexer rows in ascending position (no sort by score in the decode merge;
# the prefill and buffers kernels sort positions, int32, instead of keys, int64): the whole GPU suite, the indexer
# decode bench (B64 8K / 32K / 128K HI 32 / 64 and B1 / B8 HI 64, MXFP8; against run fp's sorted rows), and sparse MLA
# decode as graph replays with the indices in position order and in random order.
# usage: bash bench/run_h200_fq.sh [SECONDS] (default 540).
. bench/h200.sh
. bench/h200_call.sh fq ${1:-540}
export OMP_NUM_THREADS=1
timeout -s INT -k 15 150 python3 -m pytest -q -rfE -p no:cacheprovider -n 14 -m gpu tests > $R/gpu_all.log 2>&1
echo "== gpu suite rc=$? at $(( $(date +%s) - start )) s"; test_summary $R/gpu_all.log; save
indexer_decode b64 64 8192,32768,131072 32,64
indexer_decode small 1,8 8192,32768,131072 64
for order in position random; do
  if [ "$(left)" -gt 70 ]; then
    timeout $(( $(left) )) python3 bench/bench_sparse_mla.py --quick-decode --index-order $order --out $R/mla_$order \
      > $R/sparse_mla_$order.log 2>&1
    echo "== sparse mla $order rc=$? at $(( $(date +%s) - start )) s"; save
  fi
done
for n in b64 small; do echo "-- $n"; python3 -m bench.result_rows indexer $R/$n/*.json 2>/dev/null | cut -c1-150; done
for order in position random; do echo "-- mla $order"; sparse_mla_rows $R/mla_$order/*.json 2>/dev/null | cut -c1-150; done
