#!/usr/bin/env bash
# Priority classes under 2x overload. One `duet serve` (2 ctx + 2 gen sims, admission queue with 4
# slots per gen worker) takes two open-loop `duet bench` runs side by side: a "high" client and a
# "low" client. Three phases, each --duration seconds:
#   unloaded  the high client alone;
#   classes   both clients, sending X-Duet-Priority: high and low (low: max_wait 2s, max_share LOW_SHARE);
#   none      both clients without the header: one class for everyone.
# CAPACITY (requests/s the fleet completes with every slot busy) sets the rates: high at 0.25x,
# low at 1.75x, 2x in all. Measure it with the calibration the script prints when CAPACITY is unset.
#
# usage: scripts/bench-priority.sh [duration=60]
# env:   OUT (default artifacts/priority), PORT (default 8300), CAPACITY (requests/s),
#        LOW_SHARE (the low class's max_share, default 0.5)
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-60}
OUT=${OUT:-artifacts/priority}
PORT=${PORT:-8300}
LOW_SHARE=${LOW_SHARE:-0.5}
MODEL=meta-llama/Llama-3.1-8B-Instruct
make -s build >/dev/null
rm -rf "$OUT" && mkdir -p "$OUT"
cat >"$OUT/serve.yaml" <<YAML
server: {host: 127.0.0.1, port: $PORT}
log: {level: warn}
queue:
  enabled: true
  inflight_per_worker: 4
  classes:
    - {name: high}
    - {name: normal}
    - {name: low, max_wait: 2s, max_share: $LOW_SHARE}
fleet:
  context: {engine: sim, count: 2, base_port: $((PORT + 10))}
  generation: {engine: sim, count: 2, base_port: $((PORT + 20))}
YAML
./bin/duet serve --config "$OUT/serve.yaml" >"$OUT/serve.log" 2>&1 &
SERVE=$!
trap 'kill $SERVE 2>/dev/null; wait $SERVE 2>/dev/null' EXIT
for _ in $(seq 100); do curl -sf "127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.2; done

# bench NAME RATE [HEADER]: one open-loop client of single-turn requests.
bench() {
  local header=()
  [[ -n "${3:-}" ]] && header=(-H "X-Duet-Priority:$3")
  ./bin/duet bench -m "$MODEL" --url "127.0.0.1:$PORT" --streaming --isl 200 --osl 64 --extra-inputs ignore_eos:true \
    --request-rate "$2" --concurrency 512 --benchmark-duration "$DURATION" --benchmark-grace-period 10 \
    --num-sessions 100000 --random-seed 7 --no-progress --artifact-dir "$OUT/$1" "${header[@]}" >"$OUT/$1.log" 2>&1
}

if [[ -z "${CAPACITY:-}" ]]; then
  ./bin/duet bench -m "$MODEL" --url "127.0.0.1:$PORT" --streaming --isl 200 --osl 64 --extra-inputs ignore_eos:true \
    --concurrency 16 --num-sessions 300 --random-seed 1 --no-progress --artifact-dir "$OUT/calibration" >/dev/null 2>&1
  CAPACITY=$(jq '.request_throughput.avg' "$OUT/calibration/profile_export_aiperf.json")
fi
HIGH=$(awk -v c="$CAPACITY" 'BEGIN { printf "%.2f", c * 0.25 }')
LOW=$(awk -v c="$CAPACITY" 'BEGIN { printf "%.2f", c * 1.75 }')

# waits PRIORITY: the admitted requests of a priority class and their summed queue wait so far.
waits() {
  curl -s "127.0.0.1:$PORT/metrics" | awk -v p="priority=\"$1\"" '
    index($0, "duet_queue_wait_seconds_sum{") == 1 && index($0, p) { s += $2 }
    index($0, "duet_queue_wait_seconds_count{") == 1 && index($0, p) { n += $2 }
    END { printf "%d %f\n", n, s }'
}
# mean_wait NAME PRIORITY BEFORE: the mean queue wait (ms) of the class's requests admitted since BEFORE.
declare -A MEAN_WAIT
mean_wait() {
  read -r n1 s1 <<<"$3"
  read -r n2 s2 <<<"$(waits "$2")"
  MEAN_WAIT[$1]=$(awk -v n="$((n2 - n1))" -v s="$(awk -v a="$s2" -v b="$s1" 'BEGIN { print a - b }')" \
    'BEGIN { if (n > 0) printf "%.1f", 1000 * s / n; else print "-" }')
}

w=$(waits high); bench unloaded-high "$HIGH" high; mean_wait unloaded-high high "$w"
wh=$(waits high); wl=$(waits low)
bench classes-high "$HIGH" high & pid=$!; bench classes-low "$LOW" low; wait $pid
mean_wait classes-high high "$wh"; mean_wait classes-low low "$wl"
w=$(waits normal)
bench none-high "$HIGH" & pid=$!; bench none-low "$LOW"; wait $pid
mean_wait none-high normal "$w"; MEAN_WAIT[none-low]=${MEAN_WAIT[none-high]}

# row NAME: requests, errors (429s among them), TTFT p50/p99 of the answered ones, mean queue wait.
row() {
  local f="$OUT/$1/profile_export_aiperf.json"
  local shed
  shed=$(jq -r 'select(.error != null) | .error.code // .error' "$OUT/$1/profile_export.jsonl" 2>/dev/null | grep -c 429 || true)
  printf "| %s | %s | %s | %s | %.0f | %.0f | %s |\n" "$1" \
    "$(jq '.request_count.avg' "$f")" "$(jq '.error_request_count.avg // 0' "$f")" "$shed" \
    "$(jq '.time_to_first_token.p50' "$f")" "$(jq '.time_to_first_token.p99' "$f")" "${MEAN_WAIT[$1]}"
}
echo "capacity $CAPACITY requests/s; high $HIGH/s, low $LOW/s; $DURATION s per phase"
echo "| run | answered | errors | of them 429 | TTFT p50 (ms) | TTFT p99 (ms) | mean queue wait (ms) |"
echo "|---|---|---|---|---|---|---|"
for r in unloaded-high classes-high classes-low none-high none-low; do row "$r"; done
