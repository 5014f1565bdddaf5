#!/usr/bin/env bash
# demo.sh — the README's main job. Until the default models ship (issue: default models),
# it is a smoke run of the foundation on a small GGUF that the build generates:
# write it, inspect and validate it, quantize it to Q8_0 and Q4_K_M, validate those, and
# measure the matmul kernels against memory bandwidth on a short benchmark.
set -euo pipefail
out=${1:-build}
spex="$out/spex"
work="$out/smoke"
mkdir -p "$work"
"$spex" isa
"$spex" gen-smoke "$work/smoke-f32.gguf"
"$spex" inspect "$work/smoke-f32.gguf"
for t in q8_0 q4_K_M; do
  rm -f "$work/smoke-$t.gguf"
  "$spex" quantize "$work/smoke-f32.gguf" "$work/smoke-$t.gguf" "$t"
  "$spex" inspect "$work/smoke-$t.gguf" | tail -n 3
done
# A short run (two types, 64 MiB each); `spex bench kernels` alone is the full table (docs/performance.md).
"$spex" bench kernels --types q8_0,q4_K --size 64 --reps 2 --passes 1
