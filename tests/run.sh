#!/usr/bin/env bash
# run.sh — runs every test program of a build folder and sums their PASS/FAIL/SKIP lines.
# Usage: tests/run.sh BUILD_DIR. A program that crashes or exits non-zero without printing a
# FAIL line counts as one failure. The last line is "N passed, N failed[, N skipped]".
set -u
out=${1:-build}
pass=0; fail=0; skip=0
for t in "$out"/tests/test_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  log=$(mktemp)
  ( cd "$(dirname "$0")/.." && timeout 600 "$t" ) >"$log" 2>&1
  rc=$?
  p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log"); s=$(grep -c '^SKIP ' "$log")
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    f=1; echo "FAIL $name: exited with status $rc"
  fi
  if [ "$f" -gt 0 ] || [ "${VERBOSE:-0}" = 1 ]; then cat "$log"; else grep '^SKIP ' "$log"; fi
  echo "$name: $p passed, $f failed, $s skipped"
  pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
  rm -f "$log"
done
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
