#!/usr/bin/env bash
# The prologue of a one-call device script, sourced after bench/h200.sh: `. bench/h200_call.sh NAME SECONDS`.
# Sets T (the call's seconds), left (seconds still left, less a margin), R (/tmp/results_NAME) and save (R packed into
# $OUT/results_NAME.tgz), then moves into a copy of the committed tree (.snap/head, carried) on PYTHONPATH.
NAME=$1
T=$2
start=$(date +%s)
left() { echo $(( T - ($(date +%s) - start) - 15 )); }
R=/tmp/results_$NAME
mkdir -p "$R"
rm -rf /tmp/head
cp -r .snap/head /tmp/head
cd /tmp/head || exit 1
export PYTHONPATH=/tmp/site:/tmp/head
save() { tar czf "$OUT/results_$NAME.tgz" -C "$R" . 2>/dev/null; }
