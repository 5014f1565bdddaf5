#!/usr/bin/env bash
# server_concurrency.sh — issue 6's concurrency table: aggregate and per-request decode
# throughput of `spex serve` at -np 1, 2, 4, 8 (as many concurrent clients as slots), without
# and with the DFlash2 drafter (adaptive draft length on), on the default models.
#
# The machine is shared: its speed moves by a quarter within minutes, and one server run by
# up to 2x. Two ways to compare, chosen by MODE:
#   interleaved (default): per -np, one server of each kind started once and kept running
#     (an idle server sleeps), then ROUNDS rounds (default 10) of REQS requests per client
#     (default 4), the two servers taking turns round by round (ABBA order, so a drift hits
#     both alike). Reported: each kind's tokens over its summed wall time, and the median,
#     min and max of the per-round ratios DFlash2 / none (a round and its partner run within
#     about a second of each other). Long-lived servers are also what users run: the
#     adaptive rule's measurements are warm after the first rounds.
#   fresh: each cell the MEDIAN of REPS runs (default 3), each on a fresh server, the two
#     kinds alternating run by run, REQS requests per client per run (default 12).
# TARGET / DRAFTER (default models/target.gguf, models/drafter.gguf) choose the pair, e.g. the
# inflated one of docs/inflate.md; NPS (default "1 2 4 8") the -np values; THREADS (default 2).
# Check `uptime` first.
# Usage: [MODE=interleaved|fresh] [ROUNDS=10] [REPS=3] [REQS=..] bench/server_concurrency.sh [BUILD_DIR]
# (needs node and tests/node/node_modules)
set -euo pipefail
out=${1:-build}
spex="$out/spex"
mode=${MODE:-interleaved}
reps=${REPS:-3}
rounds=${ROUNDS:-10}
if [ "$mode" = interleaved ]; then reqs=${REQS:-4}; else reqs=${REQS:-12}; fi

# start_server NP KIND -> sets srv_pid, srv_port, srv_log
start_server() {
  local np=$1 kind=$2 extra=()
  [ "$kind" = dflash ] && extra=(-md "${DRAFTER:-models/drafter.gguf}")
  srv_log=$(mktemp)
  "$spex" serve -m "${TARGET:-models/target.gguf}" "${extra[@]}" -np "$np" -c $((np * 1024)) --port 0 -t "${THREADS:-2}" >"$srv_log" 2>&1 &
  srv_pid=$!
  srv_port=""
  for _ in $(seq 100); do
    srv_port=$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$srv_log" | sed 's/.*://' || true)
    [ -n "$srv_port" ] && curl -sf "http://127.0.0.1:$srv_port/health" >/dev/null 2>&1 && break
    sleep 0.1
  done
  [ -n "$srv_port" ] || { echo "server ($kind, -np $np) did not start:" >&2; cat "$srv_log" >&2; exit 1; }
}

stop_server() { kill "$1"; wait "$1" 2>/dev/null || true; }

# one_round PORT NP REQS OFFSET -> "tokens seconds per_request_tps"
one_round() {
  node bench/server_concurrency.mjs "$1" "$2" "$3" "$4" |
    sed 's/.*"completion_tokens":\([0-9]*\),"seconds":\([0-9.e-]*\),.*"per_request_tps_mean":\([0-9.e-]*\).*/\1 \2 \3/'
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

printf 'load average at the start: %s\n\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$mode" = interleaved ]; then
  printf '%d rounds of %d requests per client per server kind, the kinds alternating (ABBA)\n\n' "$rounds" "$reqs"
  printf '| -np | no speculation t/s | per request | DFlash2 t/s | per request | DFlash2 / none | per-round ratio: median (min–max) |\n'
  printf '| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n'
  for np in ${NPS:-1 2 4 8}; do
    start_server "$np" none;   pn=$srv_pid; portn=$srv_port; logn=$srv_log
    start_server "$np" dflash; pd=$srv_pid; portd=$srv_port; logd=$srv_log
    node bench/server_concurrency.mjs "$portn" "$np" 2 >/dev/null   # warm-up
    node bench/server_concurrency.mjs "$portd" "$np" 2 >/dev/null
    tn=0; sn=0; td=0; sd=0; ratios=(); prn=(); prd=()
    for r in $(seq "$rounds"); do
      off=$((r * np * reqs))   # new problems each round (both kinds the same ones)
      if [ $((r % 2)) -eq 1 ]; then
        read -r a b c <<<"$(one_round "$portn" "$np" "$reqs" "$off")"; read -r x y z <<<"$(one_round "$portd" "$np" "$reqs" "$off")"
      else
        read -r x y z <<<"$(one_round "$portd" "$np" "$reqs" "$off")"; read -r a b c <<<"$(one_round "$portn" "$np" "$reqs" "$off")"
      fi
      tn=$((tn + a)); td=$((td + x))
      sn=$(echo "$sn + $b" | bc -l); sd=$(echo "$sd + $y" | bc -l)
      ratios+=("$(echo "($x / $y) / ($a / $b)" | bc -l)"); prn+=("$c"); prd+=("$z")
    done
    stop_server "$pn"; stop_server "$pd"; rm -f "$logn" "$logd"
    an=$(echo "$tn / $sn" | bc -l); ad=$(echo "$td / $sd" | bc -l)
    med=$(printf '%s\n' "${ratios[@]}" | median)
    lo=$(printf '%s\n' "${ratios[@]}" | sort -g | head -1); hi=$(printf '%s\n' "${ratios[@]}" | sort -g | tail -1)
    printf '| %d | %.0f | %.0f | %.0f | %.0f | %.2fx | %.2fx (%.2f–%.2f) |\n' "$np" "$an" \
      "$(printf '%s\n' "${prn[@]}" | median)" "$ad" "$(printf '%s\n' "${prd[@]}" | median)" \
      "$(echo "$ad / $an" | bc -l)" "$med" "$lo" "$hi"
  done
else
  printf '| -np | no speculation t/s | per request | DFlash2 t/s | per request | DFlash2 / none | runs |\n'
  printf '| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n'
  # one_run NP KIND -> "aggregate_tps per_request_tps" on a fresh server
  one_run() {
    local r
    start_server "$1" "$2"
    node bench/server_concurrency.mjs "$srv_port" "$1" 2 >/dev/null   # warm-up
    r=$(node bench/server_concurrency.mjs "$srv_port" "$1" "$reqs")
    stop_server "$srv_pid"; rm -f "$srv_log"
    echo "$(echo "$r" | sed 's/.*"tokens_per_second":\([0-9.]*\).*/\1/') $(echo "$r" | sed 's/.*"per_request_tps_mean":\([0-9.]*\).*/\1/')"
  }
  for np in ${NPS:-1 2 4 8}; do
    an=(); pn=(); ad=(); pd=()
    for _ in $(seq "$reps"); do
      read -r a p <<<"$(one_run "$np" none)";   an+=("$a"); pn+=("$p")
      read -r a p <<<"$(one_run "$np" dflash)"; ad+=("$a"); pd+=("$p")
    done
    mn=$(printf '%s\n' "${an[@]}" | median); mpn=$(printf '%s\n' "${pn[@]}" | median)
    md=$(printf '%s\n' "${ad[@]}" | median); mpd=$(printf '%s\n' "${pd[@]}" | median)
    printf '| %d | %.0f | %.0f | %.0f | %.0f | %.2fx | %d |\n' "$np" "$mn" "$mpn" "$md" "$mpd" \
      "$(echo "$md / $mn" | bc -l)" "$reps"
  done
fi
printf '\nload average at the end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
