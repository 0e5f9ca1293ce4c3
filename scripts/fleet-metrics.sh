# Summaries of a running fleet's /metrics, sourced by bench-routing.sh and bench-cluster.sh. A worker or
# replica that does not answer is left out rather than failing the benchmark (set -e).

# ctx_imbalance prints max/mean of the tokens each ctx sim prefilled (duet_sim_prefill_computed_tokens_total).
ctx_imbalance() { # $1 first ctx sim port, $2 ctx sims
  local i
  for i in $(seq 0 $(($2 - 1))); do
    curl -s "http://127.0.0.1:$(($1 + i))/metrics" || true
  done | awk '/^duet_sim_prefill_computed_tokens_total/ {s += $NF; if ($NF > m) m = $NF; n++} END {if (s > 0) printf "%.3f", m / (s / n); else printf "n/a"}'
}

# route_summary prints the routing decisions, affinity breaks and store fallbacks summed over duet
# serve replicas.
route_summary() { # $1 first replica port, $2 replicas
  local i
  for i in $(seq 0 $(($2 - 1))); do curl -s "http://127.0.0.1:$(($1 + i))/metrics" || true; done | awk '
    /^duet_route_decisions_total\{/ { match($0, /decision="[^"]+"/); d[substr($0, RSTART + 10, RLENGTH - 11)] += $NF }
    /^duet_router_affinity_breaks_total\{/ { match($0, /reason="[^"]+"/); b[substr($0, RSTART + 8, RLENGTH - 9)] += $NF }
    /^duet_router_store_fallbacks_total/ { f += $NF }
    END { printf "decisions"; for (k in d) printf " %s=%d", k, d[k]
          printf "; breaks"; for (k in b) printf " %s=%d", k, b[k]
          printf "; store fallbacks %d", f }'
}
