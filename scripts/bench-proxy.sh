#!/usr/bin/env bash
# Measures what duet adds on top of the workers, side by side in one run:
#   direct  - wrk straight to one mixed sim worker (no proxy)
#   nginx   - nginx proxy_pass (upstream keepalive) to the same worker: the single-hop reference
#   duet-1  - duet with conditional disaggregation forced on: one upstream call to the same worker
#   duet-pd - duet full disaggregation: context phase on a ctx sim, KV pull, generation on a gen sim
# All sims run with --time-scale 0 (no modelled GPU time), so what is left is
# HTTP, JSON, tokenization and routing. Reports median latency at 1
# connection, requests/s at 64 connections, and duet's CPU microseconds per
# request. Needs wrk and nginx (apt-get install wrk nginx-light).
#
# usage: scripts/bench-proxy.sh [runs=5] [seconds=5]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
SECS=${2:-5}
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)" >&2; exit 1; }
command -v nginx >/dev/null || { echo "nginx is not installed (apt-get install nginx-light)" >&2; exit 1; }
make -s build
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

start() { "$@" >>"$WORK/log" 2>&1 & PIDS+=($!); }
wait_up() { for _ in $(seq 1 200); do curl -sf "$1" >/dev/null 2>&1 && return 0; sleep 0.05; done; echo "not up: $1" >&2; exit 1; }

SIM_ARGS=(--time-scale 0 --eos-probability 0 --log-level warn)
start ./bin/duet sim --role mixed --port 18101 "${SIM_ARGS[@]}"
start ./bin/duet sim --role context --port 18102 "${SIM_ARGS[@]}"
start ./bin/duet sim --role generation --port 18103 "${SIM_ARGS[@]}"
for p in 18101 18102 18103; do wait_up "http://127.0.0.1:$p/health"; done

cat >"$WORK/nginx.conf" <<NGINX
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  upstream sim { server 127.0.0.1:18101; keepalive 128; }
  server {
    listen 127.0.0.1:18180;
    location / { proxy_pass http://sim; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }
  }
}
NGINX
nginx -c "$WORK/nginx.conf" -g 'daemon off;' >>"$WORK/log" 2>&1 & PIDS+=($!)

duet_cfg() { # $1 port, $2 ctx url, $3 gen url, $4 max_local_prefill_tokens
  cat >"$WORK/duet-$1.yaml" <<YAML
log: {level: warn}
server: {port: $1}
orchestrator: {protocol: trtllm, max_local_prefill_tokens: $4}
router: {policy: least-load}
fleet:
  health_interval: 1s
  context: {engine: sim, count: 0, urls: ["$2"]}
  generation: {engine: sim, count: 0, urls: ["$3"]}
YAML
}
duet_cfg 18001 http://127.0.0.1:18102 http://127.0.0.1:18101 1000000
duet_cfg 18002 http://127.0.0.1:18102 http://127.0.0.1:18103 0
start ./bin/duet serve --config "$WORK/duet-18001.yaml"; DUET1=$!
start ./bin/duet serve --config "$WORK/duet-18002.yaml"; DUET2=$!
wait_up http://127.0.0.1:18180/health
wait_up http://127.0.0.1:18001/health
wait_up http://127.0.0.1:18002/health

cat >"$WORK/post.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":16,"ignore_eos":true,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Summarise the plot of a short story about a lighthouse keeper in two sentences."}]}'
LUA

cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
median() { sort -n | awk '{a[NR]=$1} END{ if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'; }
# wrk's latency p50 in microseconds and requests/s
run_wrk() { # $1 url $2 connections -> "p50_us rps requests"
  wrk -t1 -c"$2" -d"${SECS}s" --latency -s "$WORK/post.lua" "$1" 2>/dev/null | awk '
    /^ +50%/ { v=$2; u=1; if (v ~ /us$/) {sub(/us/,"",v)} else if (v ~ /ms$/) {sub(/ms/,"",v); u=1000} else if (v ~ /s$/) {sub(/s/,"",v); u=1000000}; p50=v*u }
    /requests in/ { n=$1 }
    /^Requests\/sec/ { rps=$2 }
    END { printf "%d %d %d\n", p50, rps, n }'
}

declare -A URL=([direct]=http://127.0.0.1:18101 [nginx]=http://127.0.0.1:18180 [duet-1]=http://127.0.0.1:18001 [duet-pd]=http://127.0.0.1:18002)
declare -A PID=([duet-1]=$DUET1 [duet-pd]=$DUET2)
TARGETS=(direct nginx duet-1 duet-pd)
HZ=$(getconf CLK_TCK)
for t in "${TARGETS[@]}"; do run_wrk "${URL[$t]}/v1/chat/completions" 8 >/dev/null; done # warm up
for r in $(seq 1 "$RUNS"); do
  for t in "${TARGETS[@]}"; do
    read -r p50 _ _ < <(run_wrk "${URL[$t]}/v1/chat/completions" 1)
    echo "$p50" >>"$WORK/$t.lat"
    before=0; [ -n "${PID[$t]:-}" ] && before=$(cpu_ticks "${PID[$t]}")
    read -r _ rps n < <(run_wrk "${URL[$t]}/v1/chat/completions" 64)
    echo "$rps" >>"$WORK/$t.rps"
    if [ -n "${PID[$t]:-}" ]; then
      after=$(cpu_ticks "${PID[$t]}")
      awk -v d=$((after-before)) -v n="$n" -v hz="$HZ" 'BEGIN{ if (n>0) printf "%.1f\n", d/hz*1e6/n }' >>"$WORK/$t.cpu"
    fi
  done
done
printf "%-8s %14s %12s %20s\n" target "p50 lat (us)" "req/s (c64)" "duet CPU us/request"
for t in "${TARGETS[@]}"; do
  cpu="-"; [ -f "$WORK/$t.cpu" ] && cpu=$(median <"$WORK/$t.cpu")
  printf "%-8s %14s %12s %20s\n" "$t" "$(median <"$WORK/$t.lat")" "$(median <"$WORK/$t.rps")" "$cpu"
done
echo "(medians of $RUNS runs of ${SECS}s each; $(nproc) cores; $(date -u +%Y-%m-%d))"
