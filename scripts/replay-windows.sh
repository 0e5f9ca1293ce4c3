#!/usr/bin/env bash
# Replays every window of a Mooncake-style trace (JSON lines with a "timestamp" in ms) on its own through
# `duet replay`, each window's timestamps rebased to 0 and its caches cold, and prints per window and
# policy the cache hit ratio, the pooled-cache oracle and the ctx prefill imbalance (whole window / per
# minute), then each policy's median over the windows. One window is one draw of how sessions happen
# to share workers and caches; a routing change that helps should help in most windows.
#
# usage: scripts/replay-windows.sh TRACE [window_seconds=300]
# env:   POLICIES (default "kv-aware,conversation"), REPLAY_ARGS (more duet replay flags, e.g.
#        "--config my.yaml --num-ctx 4 --num-gen 4 --ctx-kv-blocks 19718 --session-header none"),
#        OUT (artifact root, default artifacts/replay-windows).
set -euo pipefail
cd "$(dirname "$0")/.."
TRACE=${1:?usage: scripts/replay-windows.sh TRACE [window_seconds]}
WINDOW_MS=$((${2:-300} * 1000))
POLICIES=${POLICIES:-kv-aware,conversation}
OUT=${OUT:-artifacts/replay-windows}
read -r -a EXTRA <<<"${REPLAY_ARGS:-}"

make -s build
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# Split: window k holds the rows with k*W <= timestamp < (k+1)*W, timestamps made relative to k*W.
awk -v w="$WINDOW_MS" -v dir="$WORK" '
  match($0, /"timestamp": *[0-9]+/) {
    ts = substr($0, RSTART, RLENGTH); sub(/"timestamp": */, "", ts); k = int(ts / w)
    printf "%s\"timestamp\": %d%s\n", substr($0, 1, RSTART - 1), ts - k * w, substr($0, RSTART + RLENGTH) > (dir "/w" k ".jsonl")
  }' "$TRACE"

for f in $(ls "$WORK"/w*.jsonl | sort -V); do
  k=$(basename "$f" .jsonl)
  ./bin/duet replay --input-file "$f" --custom-dataset-type mooncake_trace --policy "$POLICIES" \
    --artifact-dir "$OUT/$k" "${EXTRA[@]}" 2>&1 | awk -v k="${k#w}" '
      /cache hit ratio/ { n = split($0, a, "│"); for (i = 3; i < n; i++) { v = a[i]; gsub(/ /, "", v); hit[i - 2] = v } }
      /^ +[^ ]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ / { run++; printf "%s %s %s %s %s %s\n", k, $1, hit[run], $3, $4, $5 }'
done >"$WORK/rows"

printf '%-7s %-24s %7s %14s %10s %11s\n' window policy hit "pooled oracle" imbalance "per minute"
awk '{printf "%-7s %-24s %7s %14s %10s %11s\n", $1, $2, $3, $4, $5, $6}' "$WORK/rows"
for p in $(awk '{print $2}' "$WORK/rows" | sort -u); do
  line="median  $(printf '%-24s' "$p")"
  for col in 3 4 5 6; do
    line+=$(awk -v p="$p" -v c="$col" '$2 == p {print $c}' "$WORK/rows" | sort -g |
      awk '{v[NR] = $1} END {m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf " %10.3f", m}')
  done
  echo "$line"
done
