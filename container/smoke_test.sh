#!/usr/bin/env bash
# Build the CPU image with the embedded model's engine baked in, start it, and get a completion through the
# published port. Prints the build time, the image size and the time from `podman run` to the first answer.
#
#   bash container/smoke_test.sh [PORT]
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${1:-18080}"
TAG=dayzero:smoke
export CONTAINERS_CONF="$PWD/container/containers.conf"

start=$(date +%s.%N)
bash container/build.sh "$TAG" --build-arg BAKE=1
built=$(date +%s.%N)

name="dayzero-smoke-$$"
trap 'podman rm -f "$name" >/dev/null 2>&1 || true' EXIT
started=$(date +%s.%N)
podman run -d --name "$name" -p "127.0.0.1:$PORT:8000" "$TAG" >/dev/null
answer=""
for _ in $(seq 1 600); do
  answer=$(curl -sf "http://127.0.0.1:$PORT/v1/completions" -H 'content-type: application/json' \
           -d '{"prompt": "The hybrid model", "max_tokens": 8, "temperature": 0}' || true)
  [ -n "$answer" ] && break
  sleep 0.5
done
answered=$(date +%s.%N)
if [ -z "$answer" ]; then
  echo "error: no answer from the container within 300 s; its log:" >&2
  podman logs "$name" >&2
  exit 1
fi
echo "answer: $answer"
echo "user in the container: $(podman exec "$name" id -un)"
# podman schedules health checks through systemd timers, which this machine may lack: run the check once by hand
podman healthcheck run "$name" >/dev/null 2>&1 && echo "health check: healthy" || echo "health check: failed"
size=$(podman image inspect --format '{{.Size}}' "$TAG")
printf 'build %.0f s, image %.2f GB, run to first answer %.1f s\n' "$(echo "$built - $start" | bc)" \
  "$(echo "$size / 1000000000" | bc -l)" "$(echo "$answered - $started" | bc)"
