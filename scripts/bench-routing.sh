#!/usr/bin/env bash
# Compares routing policies on one multi-turn workload: for each policy and each repeat, starts a fresh
# `duet serve` over simulated workers, runs `duet bench` against it, stops it; then prints
# `duet bench compare --markdown` of all runs (repeats of a policy merged into medians) and, per run, the
# ctx prefill imbalance (max/mean of the tokens each ctx sim prefilled) and the routing decisions.
#
# usage: scripts/bench-routing.sh [runs=3] [policies="round-robin least-load conversation"]
# env:   OUT (artifact root, default artifacts/routing), TIME_SCALE (sim time scale, default 1),
#        NCTX/NGEN (workers per pool, default 4/4), CTX_KV_BLOCKS (ctx KV cache in 32-token blocks,
#        default 1024 = 32k tokens, so the sessions' working set does not fit), PORT (default 18700),
#        BENCH_ARGS (replaces the workload flags below), ORCH (extra orchestrator keys, YAML flow
#        style, e.g. "max_local_prefill_tokens: 512"), QUEUE (the queue section, YAML flow mapping,
#        default "{enabled: false}"), ROUTER (extra router keys, e.g. "load_weight: 0.5"; the
#        router learns each sim's KV cache size from the sim; runs before 2026-11-26 left the router
#        believing 14000-block caches, so their kv-aware and conversation results are not comparable
#        with later ones),
#        SUFFIX (appended to every run's label).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
POLICIES=${2:-"round-robin least-load conversation"}
OUT=${OUT:-artifacts/routing}
TIME_SCALE=${TIME_SCALE:-1}
NCTX=${NCTX:-4}
NGEN=${NGEN:-4}
CTX_KV_BLOCKS=${CTX_KV_BLOCKS:-1024}
PORT=${PORT:-18700}
ORCH=${ORCH:-}
ROUTER=${ROUTER:-}
QUEUE=${QUEUE:-"{enabled: false}"}
SUFFIX=${SUFFIX:-}
MODEL=meta-llama/Llama-3.1-8B-Instruct
# shellcheck source=scripts/routing-workload.sh
source scripts/routing-workload.sh
# shellcheck source=scripts/fleet-metrics.sh
source scripts/fleet-metrics.sh
read -r -a WORKLOAD <<<"$(echo ${BENCH_ARGS:-$ROUTING_WORKLOAD})"


make -s build
mkdir -p "$OUT"
WORK=$(mktemp -d)
SERVE_PID=
cleanup() { [ -n "$SERVE_PID" ] && kill "$SERVE_PID" 2>/dev/null && wait "$SERVE_PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

serve_config() { # $1 policy
  cat >"$WORK/duet.yaml" <<YAML
log: {level: warn}
server: {host: 127.0.0.1, port: $PORT}
router: {policy: $1${ROUTER:+, $ROUTER}}
orchestrator: {protocol: trtllm${ORCH:+, $ORCH}}
queue: $QUEUE
fleet:
  run_dir: $WORK/run
  context:
    engine: sim
    count: $NCTX
    base_port: $((PORT + 10))
    args: ["--time-scale", "$TIME_SCALE", "--kv-capacity-blocks", "$CTX_KV_BLOCKS"]
  generation:
    engine: sim
    count: $NGEN
    base_port: $((PORT + 10 + NCTX))
    args: ["--time-scale", "$TIME_SCALE"]
YAML
}

DIRS=()
NOTES=()
for run in $(seq 1 "$RUNS"); do
  for policy in $POLICIES; do
    serve_config "$policy"
    ./bin/duet serve --config "$WORK/duet.yaml" >"$WORK/serve-$policy-$run.log" 2>&1 &
    SERVE_PID=$!
    for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break; sleep 0.1; done
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || { cat "$WORK/serve-$policy-$run.log" >&2; exit 1; }
    dir="$OUT/$policy$SUFFIX-$run"
    echo "== $policy, run $run -> $dir" >&2
    ./bin/duet bench -m "$MODEL" --url "127.0.0.1:$PORT" "${WORKLOAD[@]}" --label "$policy$SUFFIX" \
      --artifact-dir "$dir" --no-progress >"$WORK/bench-$policy-$run.txt"
    DIRS+=("$dir")
    NOTES+=("$policy$SUFFIX run $run: ctx prefill imbalance $(ctx_imbalance $((PORT + 10)) "$NCTX"); $(route_summary "$PORT" 1)")
    echo "${NOTES[-1]}" >&2
    kill "$SERVE_PID"; wait "$SERVE_PID" 2>/dev/null || true; SERVE_PID=
  done
done
echo "workload: duet bench ${WORKLOAD[*]}; fleet: $NCTX ctx + $NGEN gen sims, --time-scale $TIME_SCALE, ctx KV $CTX_KV_BLOCKS blocks; orchestrator: {$ORCH}; queue: $QUEUE"
./bin/duet bench compare --markdown "${DIRS[@]}"
printf '%s\n' "${NOTES[@]}"
