#!/usr/bin/env bash
# Replays every window of a Mooncake-style trace (JSON lines with a "timestamp" in ms) on its own through
# `duet replay`, each window's timestamps rebased to 0 and its caches cold, and prints per window and
# policy the cache hit ratio, the pooled-cache oracle and the ctx prefill imbalance (whole window / per
# minute), then each policy's median over the windows. One window is one draw of how sessions happen
# to share workers and caches; a routing change that helps should help in most windows.
#
# usage: scripts/replay-windows.sh TRACE [window_seconds=300]
# env:   POLICIES (default "kv-aware,conversation"), REPLAY_ARGS (more duet replay flags, e.g.
#        "--config my.yaml --num-ctx 4 --num-gen 4 --ctx-kv-blocks 19718 --session-header none"; paths
#        in them are relative to the repository root), OUT (artifact root, default
#        artifacts/replay-windows).
set -euo pipefail
TRACE=$(realpath "${1:?usage: scripts/replay-windows.sh TRACE [window_seconds]}")
cd "$(dirname "$0")/.."
WINDOW_MS=$((${2:-300} * 1000))
POLICIES=${POLICIES:-kv-aware,conversation}
OUT=${OUT:-artifacts/replay-windows}
read -r -a EXTRA <<<"${REPLAY_ARGS:-}"

make -s build
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# Split: window k holds the rows with k*W <= timestamp < (k+1)*W, timestamps made relative to k*W; one
# file open at a time (appended to, so rows out of time order are kept); awk prints the last window.
LAST=$(awk -v w="$WINDOW_MS" -v dir="$WORK" '
  match($0, /"timestamp": *[0-9]+/) {
    ts = substr($0, RSTART, RLENGTH); sub(/"timestamp": */, "", ts); k = int(ts / w)
    if (out != "" && k != last) close(out)
    out = dir "/w" k ".jsonl"; last = k; if (k > max) max = k; seen = 1
    printf "%s\"timestamp\": %d%s\n", substr($0, 1, RSTART - 1), ts - k * w, substr($0, RSTART + RLENGTH) >> out
  }
  END { if (seen) print max; else print -1 }' "$TRACE")
[ "$LAST" -ge 0 ] || { echo "replay-windows: no row of $TRACE has a \"timestamp\"" >&2; exit 1; }

for ((k = 0; k <= LAST; k++)); do
  [ -f "$WORK/w$k.jsonl" ] || continue # no request in that window
  ./bin/duet replay --input-file "$WORK/w$k.jsonl" --custom-dataset-type mooncake_trace --policy "$POLICIES" \
    --artifact-dir "$OUT/w$k" "${EXTRA[@]}" | awk -v k="$k" '
      /cache hit ratio/ { n = split($0, a, "│"); for (i = 3; i < n; i++) { v = a[i]; gsub(/ /, "", v); hit[i - 2] = v } }
      /^ +[^ ]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ / { run++; printf "%s %s %s %s %s %s\n", k, $1, hit[run], $3, $4, $5 }'
done >"$WORK/rows"

printf '%-7s %-24s %7s %14s %10s %11s\n' window policy hit "pooled oracle" imbalance "per minute"
awk '{printf "%-7s %-24s %7s %14s %10s %11s\n", $1, $2, $3, $4, $5, $6}' "$WORK/rows"
for p in $(awk '{print $2}' "$WORK/rows" | sort -u); do
  medians=()
  for col in 3 4 5 6; do
    medians+=("$(awk -v p="$p" -v c="$col" '$2 == p {print $c}' "$WORK/rows" | sort -g |
      awk '{v[NR] = $1} END {printf "%.3f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}')")
  done
  printf '%-7s %-24s %7s %14s %10s %11s\n' median "$p" "${medians[@]}"
done
