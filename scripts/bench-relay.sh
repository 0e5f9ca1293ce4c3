#!/usr/bin/env bash
# What a relay costs per request and per streamed event, side by side in one run:
#   direct  - wrk straight to one mixed sim worker (no relay)
#   nginx   - nginx proxy_pass with upstream keepalive to the same worker: the one-hop reference
#   duet-1  - duet with conditional disaggregation forced on: one upstream call to the same worker
#   duet-pd - duet full disaggregation: context call to a ctx sim, then generation on a gen sim
# Two workloads per target: a non-streaming chat request (max_tokens 8) and a
# streamed one (STREAM_TOKENS tokens). The sims run with --time-scale 0 (no
# modelled GPU time), so what is left is HTTP, JSON, tokenization and
# routing. Reports requests/s at CONNS connections and the relay's CPU (from
# /proc, user+system, nginx's master and worker together) per request, per
# streamed event and as requests per relay core. Rounds interleave the
# targets; every figure is the median over rounds.
#
# usage: scripts/bench-relay.sh [runs=3] [seconds=5]
# env:   PROTOCOL=vllm|trtllm|sglang (vllm)  CONNS=64  STREAM_TOKENS=32
#        LOG_LEVEL=warn|info (warn): at info duet writes its access log, one line per request
#        RELAY_CPU=N pins the relays (nginx, duet) to core N and wrk and the sims to the other cores
#        BASELINE=path/to/duet adds base-1 and base-pd: the same two duet targets run by another
#          build (for before/after in one run: git worktree add /tmp/before <rev> && make -C /tmp/before build)
#        SYSCALLS=1 adds, per relay, the system calls it makes per non-streaming request (strace -c
#          over one more wrk run; strace slows the relay, the counts per request stay exact)
# needs: wrk and nginx (apt-get install wrk nginx-light), curl; strace for SYSCALLS=1
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
SECS=${2:-5}
PROTOCOL=${PROTOCOL:-vllm}
CONNS=${CONNS:-64}
STREAM_TOKENS=${STREAM_TOKENS:-32}
RELAY_CPU=${RELAY_CPU:-}
BASELINE=${BASELINE:-}
LOG_LEVEL=${LOG_LEVEL:-warn}
for tool in wrk nginx curl; do
  command -v "$tool" >/dev/null || { echo "$tool is not installed (apt-get install wrk nginx-light curl)" >&2; exit 1; }
done
make -s build
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

RELAY_PIN=() OTHER_PIN=()
if [ -n "$RELAY_CPU" ]; then
  others=$(seq 0 $(($(nproc) - 1)) | grep -vx "$RELAY_CPU" | paste -sd, -)
  [ -n "$others" ] || { echo "RELAY_CPU needs a machine with 2 cores or more" >&2; exit 1; }
  RELAY_PIN=(taskset -c "$RELAY_CPU") OTHER_PIN=(taskset -c "$others")
fi

start() { "$@" >>"$WORK/log" 2>&1 & PIDS+=($!); }
wait_up() { for _ in $(seq 1 200); do curl -sf "$1" >/dev/null 2>&1 && return 0; sleep 0.05; done; echo "not up: $1" >&2; cat "$WORK/log" >&2; exit 1; }

SIM_ARGS=(--time-scale 0 --eos-probability 0 --log-level warn --protocol "$PROTOCOL")
start "${OTHER_PIN[@]}" ./bin/duet sim --role mixed --port 18101 "${SIM_ARGS[@]}"
start "${OTHER_PIN[@]}" ./bin/duet sim --role context --port 18102 --bootstrap-port 18198 "${SIM_ARGS[@]}"
start "${OTHER_PIN[@]}" ./bin/duet sim --role generation --port 18103 --bootstrap-port 18198 "${SIM_ARGS[@]}"
for p in 18101 18102 18103; do wait_up "http://127.0.0.1:$p/health"; done

cat >"$WORK/nginx.conf" <<NGINX
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $WORK/nginx-body;
  proxy_temp_path $WORK/nginx-proxy;
  upstream sim { server 127.0.0.1:18101; keepalive 128; }
  server {
    listen 127.0.0.1:18180;
    location / { proxy_pass http://sim; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }
  }
}
NGINX
start "${RELAY_PIN[@]}" nginx -c "$WORK/nginx.conf" -g 'daemon off;'
NGINX_PID=$!

duet_cfg() { # $1 port, $2 ctx url, $3 gen url, $4 max_local_prefill_tokens
  cat >"$WORK/duet-$1.yaml" <<YAML
log: {level: $LOG_LEVEL}
server: {port: $1}
orchestrator: {protocol: $PROTOCOL, max_local_prefill_tokens: $4}
router: {policy: least-load}
fleet:
  health_interval: 1s
  context: {engine: sim, count: 0, urls: ["$2"]}
  generation: {engine: sim, count: 0, urls: ["$3"]}
YAML
}
duet_cfg 18001 http://127.0.0.1:18102 http://127.0.0.1:18101 1000000
duet_cfg 18002 http://127.0.0.1:18102 http://127.0.0.1:18103 0
start "${RELAY_PIN[@]}" ./bin/duet serve --config "$WORK/duet-18001.yaml"; DUET1=$!
start "${RELAY_PIN[@]}" ./bin/duet serve --config "$WORK/duet-18002.yaml"; DUET2=$!
declare -A URL=([direct]=http://127.0.0.1:18101 [nginx]=http://127.0.0.1:18180 [duet-1]=http://127.0.0.1:18001 [duet-pd]=http://127.0.0.1:18002)
declare -A PID=([nginx]=$NGINX_PID [duet-1]=$DUET1 [duet-pd]=$DUET2)
TARGETS=(direct nginx duet-1 duet-pd)
if [ -n "$BASELINE" ]; then
  duet_cfg 18003 http://127.0.0.1:18102 http://127.0.0.1:18101 1000000
  duet_cfg 18004 http://127.0.0.1:18102 http://127.0.0.1:18103 0
  start "${RELAY_PIN[@]}" "$BASELINE" serve --config "$WORK/duet-18003.yaml"; PID[base-1]=$!
  start "${RELAY_PIN[@]}" "$BASELINE" serve --config "$WORK/duet-18004.yaml"; PID[base-pd]=$!
  URL[base-1]=http://127.0.0.1:18003 URL[base-pd]=http://127.0.0.1:18004
  TARGETS+=(base-1 base-pd)
fi
for t in "${TARGETS[@]}"; do wait_up "${URL[$t]}/health"; done

MESSAGES='"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Summarise the plot of a short story about a lighthouse keeper in two sentences."}]'
BODY_chat='{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":8,"ignore_eos":true,'"$MESSAGES"'}'
BODY_stream='{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":'"$STREAM_TOKENS"',"ignore_eos":true,"stream":true,'"$MESSAGES"'}'
for mode in chat stream; do
  body_var="BODY_$mode"
  cat >"$WORK/$mode.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '${!body_var}'
LUA
done

# cpu_ticks: user+system clock ticks of a process and its children threads
# (nginx: the master and its worker).
cpu_ticks() {
  local total=0 p
  for p in "$1" $(pgrep -P "$1" || true); do
    total=$((total + $(awk '{print $14+$15}' "/proc/$p/stat")))
  done
  echo "$total"
}
median() { sort -n | awk '{a[NR]=$1} END{ if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'; }
run_wrk() { # $1 url $2 mode -> "rps requests"
  "${OTHER_PIN[@]}" wrk -t1 -c"$CONNS" -d"${SECS}s" -s "$WORK/$2.lua" "$1" 2>/dev/null | awk '
    /requests in/ { n=$1 }
    /^Requests\/sec/ { rps=$2 }
    / Non-2xx/ { bad=$NF }
    END { if (bad > 0) { print "non-2xx answers: " bad > "/dev/stderr"; exit 1 } printf "%d %d\n", rps, n }'
}
# events: SSE events in one streamed answer through url
events() {
  curl -sf -N -H 'Content-Type: application/json' -d "$BODY_stream" "$1/v1/chat/completions" | grep -c '^data:'
}

declare -A EVENTS
for t in "${TARGETS[@]}"; do
  EVENTS[$t]=$(events "${URL[$t]}")
  for mode in chat stream; do run_wrk "${URL[$t]}/v1/chat/completions" "$mode" >/dev/null; done # warm up
done
HZ=$(getconf CLK_TCK)
for _ in $(seq 1 "$RUNS"); do
  for t in "${TARGETS[@]}"; do
    for mode in chat stream; do
      before=0; [ -n "${PID[$t]:-}" ] && before=$(cpu_ticks "${PID[$t]}")
      read -r rps n < <(run_wrk "${URL[$t]}/v1/chat/completions" "$mode")
      echo "$rps" >>"$WORK/$t.$mode.rps"
      if [ -n "${PID[$t]:-}" ]; then
        after=$(cpu_ticks "${PID[$t]}")
        awk -v d=$((after - before)) -v n="$n" -v hz="$HZ" 'BEGIN{ if (n>0) printf "%.1f\n", d/hz*1e6/n }' >>"$WORK/$t.$mode.cpu"
      fi
    done
  done
done

printf "%-8s %10s %14s %16s %12s %14s %12s\n" target "chat req/s" "CPU us/request" "requests/core-s" "stream req/s" "events/stream" "CPU us/event"
for t in "${TARGETS[@]}"; do
  cpu="-" per_core="-" per_event="-"
  if [ -f "$WORK/$t.chat.cpu" ]; then
    cpu=$(median <"$WORK/$t.chat.cpu")
    per_core=$(awk -v c="$cpu" 'BEGIN{ if (c>0) printf "%d", 1e6/c }')
    per_event=$(median <"$WORK/$t.stream.cpu" | awk -v e="${EVENTS[$t]}" '{ printf "%.2f", $1/e }')
  fi
  printf "%-8s %10s %14s %16s %12s %14s %12s\n" "$t" "$(median <"$WORK/$t.chat.rps")" "$cpu" "$per_core" \
    "$(median <"$WORK/$t.stream.rps")" "${EVENTS[$t]}" "$per_event"
done
if [ -n "${SYSCALLS:-}" ]; then
  command -v strace >/dev/null || { echo "SYSCALLS=1 needs strace (apt-get install strace)" >&2; exit 1; }
  echo "system calls per non-streaming request (strace -c -f over one ${SECS}s wrk run):"
  for t in "${TARGETS[@]}"; do
    [ -n "${PID[$t]:-}" ] || continue
    strace -c -f -p "${PID[$t]}" $(pgrep -P "${PID[$t]}" | sed 's/^/-p /') -o "$WORK/strace.$t" 2>/dev/null & tracer=$!
    sleep 0.5
    read -r _ n < <(run_wrk "${URL[$t]}/v1/chat/completions" chat)
    sleep 0.5; kill -INT "$tracer"; wait "$tracer" 2>/dev/null || true
    awk -v n="$n" -v t="$t" '$NF ~ /^(read|write|recvfrom|writev|readv|epoll_pwait|epoll_wait|sendto|sendmsg|recvmsg)$/ {
        calls = $4; errs = (NF == 6) ? $5 : 0
        line = line sprintf(" %s %.2f (%.2f failed)", $NF, calls/n, errs/n) }
      END { printf "%-8s%s\n", t, line }' "$WORK/strace.$t"
  done
fi
echo "(protocol $PROTOCOL, log level $LOG_LEVEL, $CONNS connections, medians of $RUNS rounds of ${SECS}s; relays pinned to core ${RELAY_CPU:-none}; $(nproc) cores; $(date -u +%Y-%m-%d))"
