#!/usr/bin/env bash
# func-lengths.sh — lists the C functions longer than a limit, longest first, for the rule
# that no function in src/ runs over ~120 lines except the SIMD kernels.
#
# A function counts from the first line of its definition (the column-0 line with its name)
# to its closing brace at column 0, both included. This relies on spex's layout: definitions
# and their closing braces start at column 0, bodies are indented.
# What it is not: a C parser; a definition made by a macro shows under the macro's name, if at
# all, and the SIMD-kernel exception is the reader's call (src/cpu/arch/ is listed too).
#
# Usage: scripts/func-lengths.sh [--max N] [FILE|DIR ...]   (defaults: --max 120, src)
# Prints "LINES FILE:LINE NAME" for each function over N lines. Exit status 1 if any is
# listed, 0 otherwise.
set -euo pipefail

max=120
if [ "${1:-}" = "--max" ]; then max=$2; shift 2; fi
[ $# -gt 0 ] || set -- src

find "$@" -name '*.c' -print0 | sort -z | xargs -0 awk -v max="$max" '
    FNR == 1 { state = 0 }                 # 0: outside, 1: in a signature, 2: in a body
    # A signature starts at column 0 with a name and "("; a new one, or a blank line, ends one
    # that never reached a "{" (a macro call, a prototype).
    state < 2 && /^[ \t]*$/ { state = 0 }
    state < 2 && /^[A-Za-z_][A-Za-z0-9_ \t*()]*\(/ && !/^(typedef|struct|enum|union)[ \t]/ {
        name = $0; gsub(/__attribute__\(\([^()]*(\([^()]*\)[^()]*)*\)\)/, "", name)
        sub(/\(.*/, "", name); sub(/.*[ \t*]/, "", name)
        state = name == "" ? 0 : 1; start = FNR
    }
    state == 1 && /;[ \t]*$/ { state = 0; next }             # a prototype
    state == 1 && /\{.*}[ \t]*$/ { n = 1 + FNR - start; state = 0 }   # closes on this line
    state == 1 && /\{/ { state = 2 }
    state == 2 && /^}/ { n = 1 + FNR - start; state = 0 }
    n > max { printf "%d %s:%d %s\n", n, FILENAME, start, name }
    { n = 0 }
' | sort -rn | awk '{ print } END { exit NR > 0 }'
