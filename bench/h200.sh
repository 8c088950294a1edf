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
