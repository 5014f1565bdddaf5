#!/usr/bin/env bash
# install-deps.sh — makes sure the Debian packages spex needs to build and test are present.
#
# Run as root it installs what is missing with apt-get; run as another user it lists what is
# missing and exits 1. Nothing is downloaded outside Debian's archive.
#
#   build:  gcc, make (build-essential), PCRE2 (tokenizer regexes), cJSON (JSON),
#           libmicrohttpd (the HTTP server of `spex serve`)
#   tests:  clang + its runtime (warning check, libFuzzer targets, sanitizers); nodejs + npm
#           (tests/node: the official `openai` client against `spex serve`; `.ci/run` then
#           installs the pinned client with `npm ci --prefix tests/node`); chromium (headless:
#           tests/test_server_web.c drives the chat page and CORS in a real browser)
#   cross:  gcc-aarch64-linux-gnu (CI checks that the aarch64 build compiles)
#   tools:  python3-numpy, python3-jinja2 (tools/ref: regenerates golden files and the Jinja
#           fixtures; not needed by the tests)
set -euo pipefail
pkgs=(build-essential libpcre2-dev libcjson-dev libmicrohttpd-dev clang libclang-rt-14-dev nodejs npm chromium python3 python3-numpy python3-jinja2 gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
# clang's runtime package name follows the clang version Debian ships.
if command -v clang >/dev/null 2>&1; then
  v=$(clang -dumpversion | cut -d. -f1)
  pkgs=("${pkgs[@]/libclang-rt-14-dev/libclang-rt-$v-dev}")
fi
# NodeSource's nodejs package bundles npm and conflicts with Debian's: an npm already on PATH
# counts as installed.
if command -v npm >/dev/null 2>&1; then
  for i in "${!pkgs[@]}"; do [ "${pkgs[$i]}" = npm ] && unset 'pkgs[i]'; done
  pkgs=("${pkgs[@]}")
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "missing Debian packages: ${missing[*]}" >&2
  echo "run as root: apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
