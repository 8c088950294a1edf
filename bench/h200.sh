#!/usr/bin/env bash
# Prepare the H200 machine (the project is not pip-installed there): fla-core 0.6.0 from .whl/ as the peer,
# the checkout on PYTHONPATH. Source it, then run tests and benchmarks: `. bench/h200.sh && python bench/...`.
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="/tmp/site:$(pwd)"
OUT="${OUT:-bench/results}"
mkdir -p "$OUT"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
# Triton's compile cache travels between device calls: the GPU tests and benchmarks are compile-bound (a fresh machine
# spends minutes in ptxas). A call's `save_caches` leaves $OUT/caches.tgz.part-* (at most 15 MiB each: what comes back
# from $OUT is at most 16 MiB a file); put them under .tcache/ here and carry .tcache in the next call.
export TRITON_CACHE_DIR=/tmp/dz_cache/triton
mkdir -p "$TRITON_CACHE_DIR"
if ls .tcache/caches.tgz.part-* >/dev/null 2>&1; then
  cat .tcache/caches.tgz.part-* | tar xz -C /tmp/dz_cache && echo "triton cache: $(ls "$TRITON_CACHE_DIR" | wc -l) entries carried in"
fi
# What comes back from $OUT is at most 64 MiB together (results included) and what is carried in at most 64 MiB
# (with .snap and .whl), so the archive keeps to CACHE_BYTES: while it is larger, the oldest fifth of the kernels (by
# build time) is dropped (run oa's six parts did not all come back).
CACHE_BYTES=${CACHE_BYTES:-$(( 45 * 1024 * 1024 ))}
save_caches() {
  local entries
  while :; do
    tar czf /tmp/dz_caches.tgz -C /tmp/dz_cache triton 2>/dev/null
    [ "$(stat -c %s /tmp/dz_caches.tgz)" -le "$CACHE_BYTES" ] && break
    entries=$(ls "$TRITON_CACHE_DIR" | wc -l)
    [ "$entries" -eq 0 ] && break
    (cd "$TRITON_CACHE_DIR" && ls -1tr | head -n $(( entries / 5 + 1 )) | xargs rm -rf)
  done
  split -b 15M /tmp/dz_caches.tgz "$OUT/caches.tgz.part-"
  rm -f /tmp/dz_caches.tgz
}
