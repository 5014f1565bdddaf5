#!/usr/bin/env bash
# server_concurrency.sh — issue 6's concurrency table: aggregate and per-request decode
# throughput of `spex serve` at -np 1, 2, 4, 8 (as many concurrent clients as slots, 3 requests
# each), without and with the DFlash2 drafter (adaptive draft length on), on the default models.
# Usage: bench/server_concurrency.sh [BUILD_DIR]   (needs node and tests/node/node_modules)
set -euo pipefail
out=${1:-build}
spex="$out/spex"
printf '| -np | no speculation t/s | per request | DFlash2 t/s | per request | DFlash2 / none |\n'
printf '| ---: | ---: | ---: | ---: | ---: | ---: |\n'
for np in 1 2 4 8; do
  declare -A agg per
  for mode in none dflash; do
    extra=()
    [ "$mode" = dflash ] && extra=(-md models/drafter.gguf)
    log=$(mktemp)
    "$spex" serve -m models/target.gguf "${extra[@]}" -np "$np" -c $((np * 1024)) --port 0 -t 2 >"$log" 2>&1 &
    pid=$!
    port=""
    for _ in $(seq 100); do
      port=$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$log" | sed 's/.*://' || true)
      [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
      sleep 0.1
    done
    node bench/server_concurrency.mjs "$port" "$np" 3 >/dev/null   # warm-up
    r=$(node bench/server_concurrency.mjs "$port" "$np" 3)
    kill "$pid"; wait "$pid" 2>/dev/null || true
    rm -f "$log"
    agg[$mode]=$(echo "$r" | sed 's/.*"tokens_per_second":\([0-9.]*\).*/\1/')
    per[$mode]=$(echo "$r" | sed 's/.*"per_request_tps_mean":\([0-9.]*\).*/\1/')
  done
  printf '| %d | %.0f | %.0f | %.0f | %.0f | %.2fx |\n' "$np" "${agg[none]}" "${per[none]}" "${agg[dflash]}" \
    "${per[dflash]}" "$(echo "${agg[dflash]} / ${agg[none]}" | bc -l)"
done
