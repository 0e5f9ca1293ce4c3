#!/usr/bin/env bash
# The admission queue off versus on (session boost) on a saturated fleet: more sessions in flight than
# queue slots, think times shorter than the backlog. Runs scripts/bench-routing.sh with the conversation
# policy twice (queue off, then on) and prints both side by side.
#
# usage: scripts/bench-queue.sh [runs=3]
# env:   OUT (default artifacts/queue), NCTX/NGEN (default 2/2), QUEUE_ON (the queue section when on),
#        BENCH_ARGS (replaces the workload below); see scripts/bench-routing.sh for the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
OUT=${OUT:-artifacts/queue}
export NCTX=${NCTX:-2} NGEN=${NGEN:-2}
QUEUE_ON=${QUEUE_ON:-"{enabled: true, inflight_per_worker: 4, session_boost_ttl: 60s, max_wait: 120s}"}
# 64 sessions of 5 +- 1 turns, 32 in flight (4x the 8 queue slots), 200 +- 100 ms think time.
export BENCH_ARGS=${BENCH_ARGS:-"--streaming --num-sessions 64 --session-turns-mean 5 --session-turns-stddev 1
  --session-turn-delay-mean 200 --session-turn-delay-stddev 100 --shared-system-prompt-length 1000
  --user-context-prompt-length 2000 --isl 200 --isl-stddev 50 --osl 100 --osl-stddev 30
  --extra-inputs ignore_eos:true --concurrency 32 --random-seed 2"}
OUT=$OUT SUFFIX=-queue-off QUEUE="{enabled: false}" scripts/bench-routing.sh "$RUNS" conversation >/dev/null
OUT=$OUT SUFFIX=-queue-on QUEUE="$QUEUE_ON" scripts/bench-routing.sh "$RUNS" conversation >/dev/null
echo "workload: duet bench $(echo $BENCH_ARGS); fleet: $NCTX ctx + $NGEN gen sims; queue on: $QUEUE_ON"
./bin/duet bench compare --markdown "$OUT"/conversation-queue-*
