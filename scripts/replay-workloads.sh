#!/usr/bin/env bash
# Replays the three workloads routing changes are judged on, with the
# default config (or --config FILE in REPLAY_ARGS), 4 ctx + 4 gen workers,
# each at two ctx cache sizes: duet's synthetic multi-turn chat, document
# QA (many questions over a pool of long documents, no session ids) and the
# Mooncake FAST'25 conversation trace (whole hour, no ids).
#
#   scripts/replay-workloads.sh MOONCAKE_TRACE [OUT_DIR]
#
# MOONCAKE_TRACE is conversation_trace.jsonl from the kvcache-ai/Mooncake
# repository (FAST25-release/traces/; not shipped here). Env: DUET (the
# binary, default bin/duet), POLICIES (default
# "least-load,kv-aware,conversation"), REPLAY_ARGS (extra duet replay
# flags, e.g. "--kv-events" or "--config my.yaml"). Each workload's
# side-by-side table is printed and kept in OUT_DIR (default
# artifacts/workloads).
set -euo pipefail
trace=${1:?usage: $0 MOONCAKE_TRACE [OUT_DIR]}
out=${2:-artifacts/workloads}
duet=${DUET:-bin/duet}
policies=${POLICIES:-least-load,kv-aware,conversation}
read -r -a extra <<< "${REPLAY_ARGS:-}"
mkdir -p "$out"
fleet=(--num-ctx 4 --num-gen 4)

run() { # name, then duet replay flags
  local name=$1
  shift
  echo "== $name"
  "$duet" replay "$@" "${fleet[@]}" --policy "$policies" --artifact-dir "$out/$name" "${extra[@]}" 2>&1 |
    tee "$out/$name.txt" | grep -vE '^duet replay: '
}

run synthetic --num-sessions 96 --session-turns-mean 6 --session-turns-stddev 2 --session-turn-delay-mean 1000 \
  --session-turn-delay-stddev 500 --shared-system-prompt-length 1000 --user-context-prompt-length 3000 --isl 200 \
  --isl-stddev 50 --osl 100 --osl-stddev 30 --concurrency 30 --random-seed 1 --ctx-kv-blocks 1024,4096
run document-qa --num-sessions 2000 --session-turns-mean 1 --prefix-prompt-pool-size 150 --prefix-prompt-length 25000 \
  --prefix-prompt-length-stddev 6000 --isl 100 --osl 50 --concurrency 16 --random-seed 1 --session-header none \
  --ctx-kv-blocks 11000,44000
run mooncake --input-file "$trace" --custom-dataset-type mooncake_trace --ctx-kv-blocks 19718,9859
