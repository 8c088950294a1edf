#!/usr/bin/env bash
# Twenty-third session of 2026-12-06, whatever one-GPU card comes: on an H200, run vb's steps (issue 4's bench with
# the 64-call graph column, an H200's first, then the candidate buffer at B64); on any other card, run wa's (run va's
# two fp32-cache indexer tests alone, the candidate buffer, the whole GPU suite). Run wa came from this script on an
# H100.
# usage: bash bench/run_h200_wb.sh [SECONDS] (default 560); carry .whl, .snap and .tcache.
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash bench/run_h200_vb.sh "$@"
fi
exec bash bench/run_h200_wa.sh "$@"
