#!/usr/bin/env bash
# demo.sh — the README's main job: the default models of models/ (a trained qwen3 target and
# its DFlash2 drafter, issue 5) on the 8 held-out demo problems, target alone vs DFlash2 at
# T = 0 and T = 1 (`spex demo`, tools/demo.c): one table for the pair as shipped, one for the
# pair inflated to a Qwen3-0.6B-sized trunk (made once, cached in the build folder). Without
# models/ it falls back to the smoke run of the foundation on a GGUF the build generates.
set -euo pipefail
out=${1:-build}
spex="$out/spex"
"$spex" isa
if [ -f models/target.gguf ] && [ -f models/drafter.gguf ]; then
  "$spex" demo -m models/target.gguf -md models/drafter.gguf -f models/demo.jsonl --cache "$out"
  exit 0
fi
echo "models/ has no default models: smoke run instead"
work="$out/smoke"
mkdir -p "$work"
"$spex" gen-smoke "$work/smoke-f32.gguf"
"$spex" inspect "$work/smoke-f32.gguf"
for t in q8_0 q4_K_M; do
  rm -f "$work/smoke-$t.gguf"
  "$spex" quantize "$work/smoke-f32.gguf" "$work/smoke-$t.gguf" "$t"
  "$spex" inspect "$work/smoke-$t.gguf" | tail -n 3
done
# A short run (two types, 64 MiB each); `spex bench kernels` alone is the full table (docs/performance.md).
"$spex" bench kernels --types q8_0,q4_K --size 64 --reps 2 --passes 1
