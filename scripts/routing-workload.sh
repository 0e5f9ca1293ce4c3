# The routing benchmark's workload, sourced by bench-routing.sh, bench-cluster.sh and validate-replay.sh
# (duet bench / duet replay flags). 96 sessions of 6 +- 2 turns, 30 in flight, 1 +- 0.5 s think time;
# each session has a 1000-token system prompt shared by all and a 3000-token context of its own, then
# 200 +- 50 new tokens and 100 +- 30 output tokens a turn. The spreads matter: with identical sessions in
# lock step a round-robin counter sends a session's turns to the same worker by coincidence.
# shellcheck disable=SC2034 # used by the scripts that source this file
ROUTING_WORKLOAD="--streaming --num-sessions 96 --session-turns-mean 6 --session-turns-stddev 2
  --session-turn-delay-mean 1000 --session-turn-delay-stddev 500
  --shared-system-prompt-length 1000 --user-context-prompt-length 3000 --isl 200 --isl-stddev 50
  --osl 100 --osl-stddev 30 --extra-inputs ignore_eos:true --concurrency 30 --random-seed 1"
