#!/usr/bin/env bash
# Runs real aiperf (pip install aiperf) with the flags of a `duet bench` run, so both tools measure the
# same workload and `duet bench compare` can put their exports side by side.
#
# usage: scripts/aiperf.sh [duet bench flags...]
#   scripts/aiperf.sh -m meta-llama/Llama-3.1-8B-Instruct --url 127.0.0.1:8000 --streaming \
#     --num-sessions 64 --session-turns-mean 6 --session-turn-delay-mean 1000 --isl 200 --osl 100 \
#     --extra-inputs ignore_eos:true --concurrency 16 --random-seed 1 --artifact-dir artifacts/aiperf
#   duet bench compare artifacts/aiperf artifacts/duet
#
# Targets aiperf 0.12.0: every duet bench flag this script passes on is one of that release's CLI flags
# (checked against its CLI definitions, src/aiperf/config/flags/ in aiperf 0.12.0). This script
#   - drops duet-only flags: --label, --oracle-block-size, --no-progress, --no-session-affinity-header;
#   - maps --tokenizer cl100k_base|o200k_base to aiperf's offline --tokenizer builtin (keeps any other name);
#   - refuses --url-strategy turn_round_robin (duet only: aiperf's only strategy, round_robin, keeps a
#     session's turns on one URL);
#   - adds --use-server-token-count (duet bench counts tokens from the server's usage) and --ui-type simple.
# DRY_RUN=1 prints the aiperf command instead of running it.
set -euo pipefail

args=(profile --use-server-token-count --ui-type simple)
while [ $# -gt 0 ]; do
  case "$1" in
    --label|--oracle-block-size) shift 2 ;;
    --url-strategy=turn_round_robin) set -- --url-strategy turn_round_robin "${@:2}" ;;
    --url-strategy)
      if [ "${2:-}" = turn_round_robin ]; then
        echo "aiperf.sh: aiperf has no --url-strategy turn_round_robin (its round_robin keeps a session on one URL)" >&2
        exit 2
      fi
      args+=("$1" "${2:-}")
      shift 2 ;;
    --label=*|--oracle-block-size=*|--no-progress) shift ;;
    --no-session-affinity-header)
      echo "aiperf.sh: aiperf has no --no-session-affinity-header; dropped" >&2
      shift ;;
    --tokenizer)
      case "${2:-}" in
        cl100k_base|o200k_base) args+=(--tokenizer builtin) ;;
        *) args+=(--tokenizer "${2:-}") ;;
      esac
      shift 2 ;;
    --tokenizer=*)
      case "${1#--tokenizer=}" in
        cl100k_base|o200k_base) args+=(--tokenizer builtin) ;;
        *) args+=("$1") ;;
      esac
      shift ;;
    *) args+=("$1"); shift ;;
  esac
done

if [ "${DRY_RUN:-0}" = 1 ]; then
  printf 'aiperf'
  printf ' %q' "${args[@]}"
  printf '\n'
  exit 0
fi
command -v aiperf >/dev/null || { echo "aiperf.sh: aiperf is not installed (pip install aiperf)" >&2; exit 1; }
exec aiperf "${args[@]}"
