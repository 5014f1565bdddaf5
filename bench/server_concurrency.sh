#!/usr/bin/env bash
# server_concurrency.sh — issue 6's concurrency table: aggregate and per-request decode
# throughput of `spex serve` at -np 1, 2, 4, 8 (as many concurrent clients as slots), without
# and with the DFlash2 drafter (adaptive draft length on), on the default models.
#
# The machine is shared and one server run moves by up to 2x, so each cell is the MEDIAN of
# REPS runs (default 3), each on a fresh server, the two modes alternating run by run so that a
# burst of load hits both. REQS requests per client per run (default 12). Check `uptime` first.
# TARGET / DRAFTER (default models/target.gguf, models/drafter.gguf) choose the pair, e.g. the
# inflated one of docs/inflate.md; NPS (default "1 2 4 8") the -np values; THREADS (default 2).
# Usage: [REPS=3] [REQS=12] bench/server_concurrency.sh [BUILD_DIR]   (needs node, tests/node/node_modules)
set -euo pipefail
out=${1:-build}
spex="$out/spex"
reps=${REPS:-3}
reqs=${REQS:-12}

# one_run NP MODE -> "aggregate_tps per_request_tps"
one_run() {
  local np=$1 mode=$2 extra=() log port pid r
  [ "$mode" = dflash ] && extra=(-md "${DRAFTER:-models/drafter.gguf}")
  log=$(mktemp)
  "$spex" serve -m "${TARGET:-models/target.gguf}" "${extra[@]}" -np "$np" -c $((np * 1024)) --port 0 -t "${THREADS:-2}" >"$log" 2>&1 &
  pid=$!
  port=""
  for _ in $(seq 100); do
    port=$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$log" | sed 's/.*://' || true)
    [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    sleep 0.1
  done
  node bench/server_concurrency.mjs "$port" "$np" 2 >/dev/null   # warm-up
  r=$(node bench/server_concurrency.mjs "$port" "$np" "$reqs")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -f "$log"
  echo "$(echo "$r" | sed 's/.*"tokens_per_second":\([0-9.]*\).*/\1/') $(echo "$r" | sed 's/.*"per_request_tps_mean":\([0-9.]*\).*/\1/')"
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

printf 'load average at the start: %s\n\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '| -np | no speculation t/s | per request | DFlash2 t/s | per request | DFlash2 / none | runs |\n'
printf '| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n'
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
printf '\nload average at the end: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
