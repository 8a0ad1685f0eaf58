#!/usr/bin/env bash
# The TypeScript client's tests, as CI runs them:
#
#   sdk/typescript/test.sh MEMTAPE_BINARY
#
# installs the pinned dev dependencies (npm ci; skipped when node_modules already matches
# package-lock.json, so it runs offline then), checks that the generated types are fresh
# from openapi.json, compiles with tsc, and runs node's test runner on the compiled client
# against real servers started from MEMTAPE_BINARY (`serve --model none` on fresh data
# directories, with and without API keys).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
[ $# -ge 1 ] || { echo "usage: $0 MEMTAPE_BINARY" >&2; exit 2; }
bin="$(realpath "$1")"
[ -x "$bin" ] || { echo "$0: $bin is not an executable" >&2; exit 2; }
cd "$here"

for tool in node npm; do
    command -v "$tool" >/dev/null || { echo "$0: needs $tool" >&2; exit 1; }
done
if ! cmp -s package-lock.json node_modules/.memtape-installed-lock || [ ! -x node_modules/.bin/tsc ]; then
    npm ci --no-audit --no-fund --loglevel=error
    cp package-lock.json node_modules/.memtape-installed-lock
fi

node scripts/generate.mjs --check
rm -rf dist
node_modules/.bin/tsc -p tsconfig.json
MEMTAPE_BIN="$bin" node --test test/*.test.mjs
