#!/usr/bin/env bash
# Several duet replicas over one fleet: one replica vs three replicas sharing state through Redis vs three
# replicas with local state, on the routing benchmark's fleet and workload (scripts/bench-routing.sh), the
# three set-ups interleaved run by run. Each run starts a fresh fleet (`duet launch`: cold caches), a fresh
# redis-server for the shared set-up, and the replicas (`duet serve` over the fleet's URLs), then feeds
# them with `duet bench --url-strategy turn_round_robin`: every request goes to the next replica, so
# consecutive turns of a session go through different replicas. Prints `duet bench compare --markdown`
# and, per run, the ctx prefill imbalance (max/mean of the tokens each ctx sim prefilled) and the store's
# cost (round trips per request during the benchmark; the routing call's latency p50/p99 from
# duet_cluster_store_find_seconds).
#
# usage: scripts/bench-cluster.sh [runs=3] [setups="single shared local"]
# env:   OUT (default artifacts/cluster), TIME_SCALE (default 1), NCTX/NGEN (default 4/4), CTX_KV_BLOCKS
#        (default 1024), PORT (default 18800), REPLICAS (default 3), BENCH_ARGS (replaces the workload).
# needs: redis-server (Debian package redis-server).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
SETUPS=${2:-"single shared local"}
OUT=${OUT:-artifacts/cluster}
TIME_SCALE=${TIME_SCALE:-1}
NCTX=${NCTX:-4}
NGEN=${NGEN:-4}
CTX_KV_BLOCKS=${CTX_KV_BLOCKS:-1024}
PORT=${PORT:-18800}
REPLICAS=${REPLICAS:-3}
MODEL=meta-llama/Llama-3.1-8B-Instruct
# shellcheck source=scripts/routing-workload.sh
source scripts/routing-workload.sh
# shellcheck source=scripts/fleet-metrics.sh
source scripts/fleet-metrics.sh
read -r -a WORKLOAD <<<"$(echo ${BENCH_ARGS:-$ROUTING_WORKLOAD})"
command -v redis-server >/dev/null || { echo "bench-cluster: redis-server not found (apt-get install redis-server)" >&2; exit 1; }

make -s build
mkdir -p "$OUT"
WORK=$(mktemp -d)
PIDS=()
stop_all() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}
cleanup() { stop_all; rm -rf "$WORK"; }
trap cleanup EXIT

REDIS_PORT=$((PORT + 50))
CTX_BASE=$((PORT + 10))
GEN_BASE=$((CTX_BASE + NCTX))
urls() { # $1 base, $2 count
  local out="" i
  for i in $(seq 0 $(($2 - 1))); do out+="${out:+, }\"http://127.0.0.1:$(($1 + i))\""; done
  echo "$out"
}

wait_http() { # $1 url, $2 log
  for _ in $(seq 1 600); do curl -sf "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "bench-cluster: $1 did not answer; log:" >&2; tail -20 "$2" >&2; exit 1
}

start_fleet() {
  cat >"$WORK/fleet.yaml" <<YAML
log: {level: warn}
fleet:
  run_dir: $WORK/run
  context:
    engine: sim
    count: $NCTX
    base_port: $CTX_BASE
    args: ["--time-scale", "$TIME_SCALE", "--kv-capacity-blocks", "$CTX_KV_BLOCKS"]
  generation:
    engine: sim
    count: $NGEN
    base_port: $GEN_BASE
    args: ["--time-scale", "$TIME_SCALE"]
YAML
  ./bin/duet launch --config "$WORK/fleet.yaml" >"$WORK/launch.log" 2>&1 &
  PIDS+=($!)
  for i in $(seq 0 $((NCTX - 1))); do wait_http "http://127.0.0.1:$((CTX_BASE + i))/health" "$WORK/launch.log"; done
  for i in $(seq 0 $((NGEN - 1))); do wait_http "http://127.0.0.1:$((GEN_BASE + i))/health" "$WORK/launch.log"; done
}

start_replicas() { # $1 count, $2 state
  local i
  for i in $(seq 0 $(($1 - 1))); do
    cat >"$WORK/replica-$i.yaml" <<YAML
log: {level: warn}
server: {host: 127.0.0.1, port: $((PORT + i))}
router: {policy: conversation}
orchestrator: {protocol: trtllm}
queue: {enabled: false}
cluster: {state: $2, redis: {address: "127.0.0.1:$REDIS_PORT"}}
fleet:
  context: {engine: sim, urls: [$(urls "$CTX_BASE" "$NCTX")]}
  generation: {engine: sim, urls: [$(urls "$GEN_BASE" "$NGEN")]}
YAML
    ./bin/duet serve --config "$WORK/replica-$i.yaml" >"$WORK/replica-$i.log" 2>&1 &
    PIDS+=($!)
  done
  for i in $(seq 0 $(($1 - 1))); do wait_http "http://127.0.0.1:$((PORT + i))/health" "$WORK/replica-$i.log"; done
  if [ "$2" = redis ]; then
    for i in $(seq 0 $(($1 - 1))); do
      for _ in $(seq 1 100); do
        curl -s "http://127.0.0.1:$((PORT + i))/metrics" | grep -q '^duet_cluster_store_up 1' && break
        sleep 0.1
      done
    done
  fi
}

# round_trips prints the replicas' summed count of calls to the store and of their own syncs.
round_trips() { # $1 replicas
  local i
  for i in $(seq 0 $(($1 - 1))); do curl -s "http://127.0.0.1:$((PORT + i))/metrics"; done |
    awk '/^duet_cluster_store_round_trips_total/ {rt += $NF} /^duet_cluster_store_syncs_total/ {sy += $NF} END {printf "%d %d", rt, sy}'
}

# store_cost prints round trips per request over the benchmark (the counts less $3, their values
# before the benchmark: the replicas' idle syncs before it are not the requests'), of which the syncs
# the replicas made on their own (the heartbeat between requests), and the find latency p50/p99 (ms,
# interpolated in the histogram's buckets) summed over the replicas.
store_cost() { # $1 replicas, $2 requests, $3 "round trips syncs" before the benchmark
  local i before syncs_before
  read -r before syncs_before <<<"$3"
  for i in $(seq 0 $(($1 - 1))); do curl -s "http://127.0.0.1:$((PORT + i))/metrics"; done |
    awk -v req="$2" -v before="$before" -v syncs_before="$syncs_before" '
    /^duet_cluster_store_round_trips_total/ {rt += $NF}
    /^duet_cluster_store_syncs_total/ {sy += $NF}
    /^duet_cluster_store_find_seconds_bucket/ {
      match($0, /le="[^"]+"/); le = substr($0, RSTART + 4, RLENGTH - 5); b[le] += $NF; les[le] = 1 }
    /^duet_cluster_store_find_seconds_count/ {n += $NF}
    function q(p,   k, prev, prevc, target, sorted, m, j) {
      m = 0; for (k in les) if (k != "+Inf") sorted[++m] = k + 0
      for (j = 1; j <= m; j++) for (k = j + 1; k <= m; k++) if (sorted[k] < sorted[j]) { t = sorted[j]; sorted[j] = sorted[k]; sorted[k] = t }
      target = p * n; prev = 0; prevc = 0
      for (j = 1; j <= m; j++) { c = b[sorted[j] ""]; if (c == "") c = b[sprintf("%g", sorted[j])]
        if (c >= target) return 1000 * (prev + (sorted[j] - prev) * (target - prevc) / (c - prevc + 1e-12))
        prev = sorted[j]; prevc = c }
      return -1 }
    END { if (n == 0) { printf "n/a"; exit } printf "%.2f round trips/request (%.2f of them the heartbeat; %d finds), find p50 %.3f ms, p99 %.3f ms", (rt - before) / req, (sy - syncs_before) / req, n, q(0.5), q(0.99) }'
}

DIRS=()
NOTES=()
for run in $(seq 1 "$RUNS"); do
  for setup in $SETUPS; do
    n=$REPLICAS state=local
    case $setup in
      single) n=1 ;;
      shared) state=redis ;;
      local) ;;
      *) echo "bench-cluster: unknown setup $setup (single, shared, local)" >&2; exit 1 ;;
    esac
    if [ "$state" = redis ]; then
      redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" --loglevel warning >"$WORK/redis.log" 2>&1 &
      PIDS+=($!)
      wait_redis=0; until (exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT") 2>/dev/null; do sleep 0.1; wait_redis=$((wait_redis + 1)); [ $wait_redis -lt 100 ]; done
    fi
    start_fleet
    start_replicas "$n" "$state"
    targets=()
    for i in $(seq 0 $((n - 1))); do targets+=(--url "127.0.0.1:$((PORT + i))"); done
    dir="$OUT/$setup-$run"
    echo "== $setup ($n replica(s), state $state), run $run -> $dir" >&2
    before="0 0"
    [ "$state" = redis ] && before=$(round_trips "$n")
    ./bin/duet bench -m "$MODEL" "${targets[@]}" --url-strategy turn_round_robin "${WORKLOAD[@]}" --label "$setup" \
      --artifact-dir "$dir" --no-progress >"$WORK/bench-$setup-$run.txt"
    requests=$(wc -l <"$dir/profile_export.jsonl")
    note="$setup run $run: ctx prefill imbalance $(ctx_imbalance "$CTX_BASE" "$NCTX"); $(route_summary "$PORT" "$n")"
    [ "$state" = redis ] && note+="; store: $(store_cost "$n" "$requests" "$before")"
    NOTES+=("$note")
    echo "$note" >&2
    DIRS+=("$dir")
    stop_all
  done
done
echo "workload: duet bench ${WORKLOAD[*]} --url-strategy turn_round_robin; fleet: $NCTX ctx + $NGEN gen sims, --time-scale $TIME_SCALE, ctx KV $CTX_KV_BLOCKS blocks; $REPLICAS replicas for shared and local"
./bin/duet bench compare --markdown "${DIRS[@]}"
printf '%s\n' "${NOTES[@]}"
