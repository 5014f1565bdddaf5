#!/usr/bin/env bash
# check-includes.sh — checks that spex's modules depend on each other in one direction only.
#
# What it checks: every `#include "..."` line of src/, include/, tools/, tests/ and examples/
# (resolved as the compiler does: the file's own folder, then include/, src/, and tools/ for
# tests/harness/) against the layer order
#
#     core ← tensor ← gguf ← cpu ← {model, tok, sample, quant} ← spec ← server
#
# A module of src/ may include its own headers, include/spex.h, and the headers of modules on a
# lower layer; the four modules of one layer (model, tok, sample, quant) do not include each
# other. Headers named *_internal.h or *_impl.h, those under an arch/ folder, and included .c
# files belong to their module alone. include/ includes nothing of src/. tools/ may include
# the modules' headers but not cpu/ (the kernels are the library's internals; a tool reaches
# them through the model layer or spex.h). tests/ may include anything under src/, nothing of
# tools/. examples/ includes include/spex.h only: an example is what an embedder writes.
#
# With --objects DIR (a build's obj/ folder, e.g. build/obj) it also checks the link-level
# edges, which the includes cannot show while include/spex.h declares every module's
# functions: a module's object files may use only symbols defined by its own module or by a
# lower layer (objects whose source is gone are skipped).
#
# What it is not: a check of tools/ among themselves, of fuzz/ (fuzz targets reach wherever
# their parser lives) or of system headers (<...>).
#
# Usage: scripts/check-includes.sh [--root DIR] [--objects OBJDIR]
# Exit status 0 when every edge goes the right way (or is allow-listed below), 1 with one line
# per offending edge ("FILE:LINE: from -> to ...") otherwise, 2 for a usage error.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
objdir=
while [ $# -gt 0 ]; do
  case $1 in
    --root) root=${2:?--root needs a folder}; shift 2 ;;
    --objects) objdir=${2:?--objects needs a folder}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "check-includes: unknown argument '$1' (usage: $0 [--root DIR] [--objects OBJDIR])" >&2; exit 2 ;;
  esac
done
[ -d "$root/src" ] || { echo "check-includes: $root has no src/ folder" >&2; exit 2; }
if [ -n "$objdir" ]; then
  [ -d "$objdir/src" ] || { echo "check-includes: $objdir has no src/ folder of objects" >&2; exit 2; }
  objdir=$(cd "$objdir" && pwd)
fi
cd "$root"

# The layer of each module of src/ (a new module must be placed here before it can be used).
LAYERS="core=0 tensor=1 gguf=2 cpu=3 model=4 tok=4 sample=4 quant=4 spec=5 server=6"

# Headers made by the build, not found in the tree.
GENERATED="build-info.h"

# Known edges against the rules, one per line: "FILE -> HEADER" (both relative to the root),
# each with why it stays. Nothing may be added here without the same: the list exists so that
# the check passes today and no new edge of these kinds can appear.
ALLOW=$(cat <<'EOF'
# bench kernels: times the matmul kernel table itself (spex_matmul_kernels_get, spex_r16_pack);
# it needs a benchmark entry point in the library before it can leave cpu/ alone.
tools/bench.c -> src/cpu/matmul.h
# the streaming-read probe runs the matmul stream probe kernel (spex_matmul_stream_probe).
tools/probe.c -> src/cpu/matmul.h
# bench attn: times one layer's attention kernel (spex_attention, spex_ops_get) on its own.
tools/bench_attn.c -> src/cpu/ops.h
# a test harness is the CLI with a main of its own (the Makefile builds it with -Itools).
tests/harness/serve_slow.c -> tools/cli.h
tests/harness/serve_flags.c -> tools/cli.h
EOF
)

# Known link-level edges against the layer order: "link FROM -> TO" (modules), with why.
ALLOW_LINK=$(cat <<'EOF'
EOF
)

fail=0

# ---- includes ------------------------------------------------------------------------------

dirs=$(for d in src include tools tests examples; do if [ -d "$d" ]; then echo "$d"; fi; done)
files=$(find $dirs -type f \( -name '*.c' -o -name '*.h' \) -not -path 'tests/node/*' -not -path 'tests/data/*' | sort)
# "FILE:LINE:TEXT" for every quoted include line
incl=$(printf '%s\n' $files | xargs grep -nHE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' /dev/null || true)

out=$(awk -v layers="$LAYERS" -v generated="$GENERATED" -v allow="$ALLOW" '
  function norm(p,   n, a, i, k, o) {        # a/./b/../c -> a/c
    n = split(p, a, "/"); k = 0
    for (i = 1; i <= n; i++) {
      if (a[i] == "" || a[i] == ".") continue
      if (a[i] == "..") { if (k > 0) k--; continue }
      s[++k] = a[i]
    }
    o = ""; for (i = 1; i <= k; i++) o = o (i > 1 ? "/" : "") s[i]
    return o
  }
  function dir(p) { sub(/\/[^\/]*$/, "", p); return p }
  function top(p,   a) { split(p, a, "/"); return a[1] }
  function module(p,   a) {                # src/x/... -> x; include/... -> api; tools, tests, examples
    split(p, a, "/")
    if (a[1] == "src") return a[2]
    if (a[1] == "include") return "api"
    return a[1]
  }
  function internal(p) { return p ~ /\/arch\// || p ~ /_internal\.h$/ || p ~ /_impl\.h$/ || p !~ /\.h$/ }
  BEGIN {
    n = split(layers, l, " ")
    for (i = 1; i <= n; i++) { split(l[i], kv, "="); layer[kv[1]] = kv[2] + 0; order[kv[1]] = i }
    n = split(generated, g, " "); for (i = 1; i <= n; i++) gen[g[i]] = 1
    n = split(allow, al, "\n")
    for (i = 1; i <= n; i++) {
      if (al[i] ~ /^#/ || al[i] !~ /->/) continue
      split(al[i], e, /[ \t]*->[ \t]*/); gsub(/[ \t]/, "", e[1]); gsub(/[ \t]/, "", e[2])
      allowed[e[1] " " e[2]] = 1
    }
  }
  FNR == NR { exists[$0] = 1; next }     # first input: every file of the tree
  {
    f = $0; sub(/:.*/, "", f)
    rest = substr($0, length(f) + 2); ln = rest; sub(/:.*/, "", ln)
    h = rest; sub(/^[^"]*"/, "", h); sub(/".*/, "", h)
    # resolve as the compiler does
    t = ""
    cand[1] = norm(dir(f) "/" h); cand[2] = norm("include/" h); cand[3] = norm("src/" h)
    nc = 3; if (f ~ /^tests\/harness\//) cand[++nc] = norm("tools/" h)
    for (i = 1; i <= nc; i++) if (cand[i] in exists) { t = cand[i]; break }
    if (t == "") {
      if (!(h in gen)) printf "warning: %s:%s: \"%s\" is not a file of the tree (skipped)\n", f, ln, h
      next
    }
    from = module(f); to = module(t); why = ""
    if (t == f) next
    if (from == to) next                                              # a module or folder of its own
    if (to == "api") next                                             # include/spex.h: for everyone
    if (top(f) == "src") {
      if (!(from in layer)) why = "src/" from "/ has no place in the layer order (add it to LAYERS in scripts/check-includes.sh)"
      else if (top(t) != "src") why = "src/ includes nothing of " top(t) "/"
      else if (!(to in layer)) why = "src/" to "/ has no place in the layer order"
      else if (internal(t)) why = t " is internal to " to
      else if (layer[to] == layer[from]) why = from " and " to " sit on one layer and do not include each other"
      else if (layer[to] > layer[from]) why = to " sits above " from
    } else if (from == "api") {
      why = "the public header includes nothing of " top(t) "/"
    } else if (from == "tools") {
      if (top(t) == "src" && to == "cpu" && t != "src/cpu/api.h")
        why = "tools include no cpu/ header but its interface, cpu/api.h (the kernels are internals of the library)"
      else if (top(t) == "src" && internal(t)) why = t " is internal to " to
      else if (top(t) != "src") why = "tools include nothing of " top(t) "/"
    } else if (from == "tests") {
      if (top(t) == "tools") why = "tests do not include tools/ headers (move the code into the library)"
      else if (top(t) != "src") why = "tests include nothing of " top(t) "/"
    } else if (from == "examples") {
      why = "examples include include/spex.h only"
    }
    if (why == "") next
    key = f " " t
    if (key in allowed) { used[key] = 1; next }
    printf "%s:%s: %s -> %s (\"%s\"): %s\n", f, ln, from, to, h, why
    bad++
  }
  END {
    for (k in allowed) if (!(k in used)) { split(k, e, " "); printf "warning: allow-list entry %s -> %s no longer occurs (remove it)\n", e[1], e[2] }
    printf "#edges %d\n", bad + 0
  }
' <(printf '%s\n' $files) <(printf '%s\n' "$incl"))

nbad=$(printf '%s\n' "$out" | sed -n 's/^#edges //p')
printf '%s\n' "$out" | grep -v '^#edges ' || true
if [ "$nbad" -gt 0 ]; then
  echo "check-includes: $nbad include(s) against the direction core ← tensor ← gguf ← cpu ← {model, tok, sample, quant} ← spec ← server (README.md, Layout)"
  fail=1
fi

# ---- link-level edges ------------------------------------------------------------------------

if [ -n "$objdir" ]; then
  # objects of sources that still exist: "src/<module>/... .o"
  objs=$(cd "$objdir" && find src -name '*.o' | sort | while read -r o; do
           [ -f "$root/${o%.o}.c" ] && printf '%s\n' "$o"; done)
  if [ -z "$objs" ]; then
    echo "check-includes: no objects of src/ under $objdir" >&2
    exit 2
  fi
  # "D obj sym" for defined globals, "U obj sym" for undefined ones
  syms=$(cd "$objdir" && for o in $objs; do
           nm -g --defined-only "$o" | awk -v o="$o" 'NF >= 3 { print "D", o, $3 }'
           nm -u "$o" | awk -v o="$o" 'NF >= 2 { print "U", o, $2 }'
         done)
  lout=$(awk -v layers="$LAYERS" -v allow="$ALLOW_LINK" '
    function module(p,   a) { split(p, a, "/"); return a[2] }
    BEGIN {
      n = split(layers, l, " ")
      for (i = 1; i <= n; i++) { split(l[i], kv, "="); layer[kv[1]] = kv[2] + 0 }
      n = split(allow, al, "\n")
      for (i = 1; i <= n; i++) {
        if (al[i] !~ /^link /) continue
        split(substr(al[i], 6), e, /[ \t]*->[ \t]*/); gsub(/[ \t]/, "", e[1]); gsub(/[ \t]/, "", e[2])
        allowed[e[1] " " e[2]] = 1
      }
    }
    $1 == "D" { def[$3] = $2; next }
    { use[++nu] = $2 " " $3 }
    END {
      for (i = 1; i <= nu; i++) {
        split(use[i], u, " "); o = u[1]; s = u[2]
        if (!(s in def)) continue                       # libc, libm, PCRE2, ...
        from = module(o); to = module(def[s])
        if (from == to) continue
        why = ""
        if (!(from in layer)) why = "src/" from "/ has no place in the layer order"
        else if (!(to in layer)) why = "src/" to "/ has no place in the layer order"
        else if (layer[to] == layer[from]) why = from " and " to " sit on one layer and do not use each other"
        else if (layer[to] > layer[from]) why = to " sits above " from
        if (why == "") continue
        if ((from " " to) in allowed) { usedal[from " " to] = 1; continue }
        key = from " " to
        if (!(key in seen)) { seen[key] = 1; order[++ne] = key }
        if (cnt[key]++ < 3) ex[key] = ex[key] sprintf("\n    %s uses %s (defined in %s)", o, s, def[s])
        reason[key] = why
      }
      for (i = 1; i <= ne; i++) {
        split(order[i], e, " ")
        printf "link: %s -> %s: %s (%d uses)%s\n", e[1], e[2], reason[order[i]], cnt[order[i]], ex[order[i]]
      }
      for (k in allowed) if (!(k in usedal)) { split(k, e, " "); printf "warning: link allow-list entry %s -> %s no longer occurs (remove it)\n", e[1], e[2] }
      printf "#edges %d\n", ne + 0
    }
  ' <(printf '%s\n' "$syms"))
  nlink=$(printf '%s\n' "$lout" | sed -n 's/^#edges //p')
  printf '%s\n' "$lout" | grep -v '^#edges ' || true
  if [ "$nlink" -gt 0 ]; then
    echo "check-includes: $nlink link-level edge(s) against the layer order (objects of $objdir)"
    fail=1
  fi
fi

if [ "$fail" -eq 0 ]; then
  echo "check-includes: every include${objdir:+ and link-level} edge goes core ← tensor ← gguf ← cpu ← {model, tok, sample, quant} ← spec ← server"
fi
exit "$fail"
