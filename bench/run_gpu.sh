#!/usr/bin/env bash
# Run benchmarks on a GPU machine from a checkout of the repository:
#
#     bash bench/run_gpu.sh [BENCH ...]
#
# BENCH is a benchmark's name (bench/bench_<name>.py), "kernels" (the default: attnres mhc kda_prefill kda_decode
# gated_deltanet sparse_mla indexer pooled_indexer quant moe moe_dispatch gqa_attention norm), "model" (dsa_accuracy
# runtime prefix_cache server spec_decode export qwen3_next_slice glm5_slice), "multi" (tp cp: two GPUs) or "all" (those,
# structured_host and vs_transformers: dayzero against transformers + fla, which needs fla-core in .whl/). Each writes
# $OUT/<name>.json and its PNG (OUT defaults to bench/results); a summary table comes last.
#
# The machine brings torch and Triton. Wheels it lacks (the peers: fla-core 0.6.0; matplotlib for the plots; the
# project's own dependencies for the model benchmarks) are installed from .whl/ when the checkout carries it: fetch
# them once where there is a network, e.g. `python3 -m pip download fla-core==0.6.0 matplotlib --no-deps -d .whl`.
# The checkout itself goes on PYTHONPATH. BENCH_COMMIT names the measured commit where the copy has no .git;
# BENCH_TIMEOUT (seconds, default 900) bounds each benchmark.
set -u
cd "$(dirname "$0")/.." || exit 1
OUT="${OUT:-bench/results}"
mkdir -p "$OUT"
KERNELS="attnres mhc kda_prefill kda_decode gated_deltanet sparse_mla indexer pooled_indexer quant moe moe_dispatch gqa_attention norm"
MODEL="dsa_accuracy runtime prefix_cache server spec_decode export qwen3_next_slice glm5_slice"
MULTI="tp cp"

if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/bench_site .whl/*.whl
fi
export PYTHONPATH="/tmp/bench_site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export BENCH_COMMIT="${BENCH_COMMIT:-$(git rev-parse --short=7 HEAD 2>/dev/null)}"
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"

names=()
for arg in "${@:-kernels}"; do
  case "$arg" in
    kernels) names+=($KERNELS) ;;
    model) names+=($MODEL) ;;
    multi) names+=($MULTI) ;;
    all) names+=($KERNELS $MODEL $MULTI structured_host vs_transformers) ;;
    *) names+=("$arg") ;;
  esac
done

failed=()
for name in "${names[@]}"; do
  echo "== $name"
  timeout "${BENCH_TIMEOUT:-900}" python3 -m "bench.bench_$name" --out "$OUT" || failed+=("$name")
done

echo
python3 -m bench.plot --summary $(for name in "${names[@]}"; do [ -f "$OUT/$name.json" ] && echo "$OUT/$name.json"; done)
[ ${#failed[@]} -eq 0 ] || { echo "failed: ${failed[*]}"; exit 1; }
