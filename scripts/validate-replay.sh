#!/usr/bin/env bash
# Holds duet replay to reality: the routing benchmark's workload (scripts/bench-routing.sh) on a live
# simulated fleet and through `duet replay` with the same fleet model, policy by policy, side by side.
#
# 1. Calibration: the serving path's own latency (HTTP hops, tokenization, relay), which the worker model
#    does not have, is measured once at concurrency 1 on a small workload: live turn >= 1 TTFT p50 minus
#    replayed. It is passed to the replay as --serving-overhead.
# 2. The benchmark workload, live (RUNS runs per policy) and replayed.
# 3. A table: hit ratio and turn >= 1 TTFT p50, live (median) vs replay, with the differences.
#
# usage: scripts/validate-replay.sh [runs=2] [policies="round-robin least-load consistent-hash kv-aware conversation"]
# env:   OUT (default artifacts/validate-replay), CTX_KV_BLOCKS (default 1024), PORT (default 18900)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-2}
POLICIES=${2:-"round-robin least-load consistent-hash kv-aware conversation"}
OUT=${OUT:-artifacts/validate-replay}
CTX_KV_BLOCKS=${CTX_KV_BLOCKS:-1024}
# The live router learns the ctx sims' cache size from them; the replay's modelled workers report it too.
export PORT=${PORT:-18900} CTX_KV_BLOCKS
FLEET=(--num-ctx 4 --num-gen 4 --ctx-kv-blocks "$CTX_KV_BLOCKS")
# shellcheck source=scripts/routing-workload.sh
source scripts/routing-workload.sh
WORKLOAD=$ROUTING_WORKLOAD
CALIBRATION="--streaming --num-sessions 12 --session-turns-mean 4 --session-turn-delay-mean 200
  --shared-system-prompt-length 1000 --user-context-prompt-length 3000 --isl 200 --isl-stddev 50
  --osl 50 --extra-inputs ignore_eos:true --concurrency 1 --random-seed 1"
make -s build
rm -rf "$OUT"
mkdir -p "$OUT"

# row prints a metric's values from a `duet bench compare --markdown` table, one per column.
row() { # $1 table file, $2 metric name
  awk -F'|' -v m="$2" '{ name = $2; gsub(/^ +| +$/, "", name) } name == m { for (i = 3; i < NF; i++) { v = $i; gsub(/[ ,]/, "", v); printf "%s ", v } }' "$1"
}

echo "== calibration (concurrency 1)" >&2
OUT="$OUT/calibration" BENCH_ARGS="$CALIBRATION" scripts/bench-routing.sh 1 conversation >"$OUT/calibration-live.md"
# shellcheck disable=SC2086
./bin/duet replay $CALIBRATION --policy conversation "${FLEET[@]}" --label replay --artifact-dir "$OUT/calibration-replay" >/dev/null 2>&1
./bin/duet bench compare --markdown "$OUT/calibration-replay/replay-conversation" >"$OUT/calibration-replay.md"
live=$(row "$OUT/calibration-live.md" "TTFT turns ≥1 p50 (ms)")
replayed=$(row "$OUT/calibration-replay.md" "TTFT turns ≥1 p50 (ms)")
OVERHEAD_MS=$(awk -v a="$live" -v b="$replayed" 'BEGIN { d = a - b; if (d < 0) d = 0; printf "%.1f", d }')
echo "serving overhead: live $live ms - replayed $replayed ms = $OVERHEAD_MS ms" >&2

echo "== live runs" >&2
OUT="$OUT/live" scripts/bench-routing.sh "$RUNS" "$POLICIES" >"$OUT/live.md"
echo "== replay" >&2
# shellcheck disable=SC2086
./bin/duet replay $WORKLOAD --policy "$(echo $POLICIES | tr ' ' ',')" "${FLEET[@]}" --serving-overhead "${OVERHEAD_MS}ms" \
  --label replay --artifact-dir "$OUT/replay" >"$OUT/replay.txt" 2>&1
read -r -a policies <<<"$POLICIES"
./bin/duet bench compare --markdown "${policies[@]/#/$OUT/replay/replay-}" >"$OUT/replay.md"

read -r -a live_hit <<<"$(row "$OUT/live.md" "cache hit ratio")"
read -r -a live_ttft <<<"$(row "$OUT/live.md" "TTFT turns ≥1 p50 (ms)")"
read -r -a rep_hit <<<"$(row "$OUT/replay.md" "cache hit ratio")"
read -r -a rep_ttft <<<"$(row "$OUT/replay.md" "TTFT turns ≥1 p50 (ms)")"
echo "serving overhead (calibrated at concurrency 1): ${OVERHEAD_MS} ms; live: median of $RUNS runs per policy"
echo
echo "| policy | hit ratio, live | replay | difference | turn ≥1 TTFT p50 live (ms) | replay (ms) | difference |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
# Compare's columns follow the order of first appearance, which both runs share.
for i in "${!policies[@]}"; do
  awk -v p="${policies[$i]}" -v lh="${live_hit[$i]}" -v rh="${rep_hit[$i]}" -v lt="${live_ttft[$i]}" -v rt="${rep_ttft[$i]}" \
    'BEGIN { printf "| %s | %.3f | %.3f | %+.3f | %.1f | %.1f | %+.0f%% |\n", p, lh, rh, rh - lh, lt, rt, 100 * (rt - lt) / lt }'
done
