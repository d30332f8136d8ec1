#!/usr/bin/env bash
# parquet-fixtures.sh regenerates data/testdata/records/: small parquet
# files written by an independent writer (scripts/parquet-fixtures.js says
# which and how) and JSON Lines files of the same records. It installs
# parquet-wasm and apache-arrow (pinned) into a temporary directory with
# npm; nothing is installed in the repository. Needs node and npm.
# Regenerate only when the records change.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm install --silent --no-audit --no-fund --no-save \
  parquet-wasm@0.8.0 apache-arrow@21.2.0 >/dev/null)
cp "$root/scripts/parquet-fixtures.js" "$work/"
node "$work/parquet-fixtures.js" "$root/data/testdata/records"
echo "wrote data/testdata/records/"
