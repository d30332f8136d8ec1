#!/usr/bin/env bash
# Padded against packed fine-tuning (issue #34): Debian's fortunes (every
# file of the fortunes package) as answers to one fixed question, tokenized with GPT-2's tokenizer, the GPT
# reference (6 layers, width 384) at context 256; the two runs alternate
# ROUNDS times, and each prints its trained tokens per second, padding
# fraction and allocator peak from its -summary. Needs the fortunes
# package and scripts/fetch-tokenizers.sh's GPT-2 files.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${STEPS:-10}
rounds=${ROUNDS:-2}
tok=${MEMFIT_TOKENIZERS:-$HOME/.cache/memfit/tokenizers}/gpt2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -d "$tok" ] || { echo "no GPT-2 tokenizer in $tok (run scripts/fetch-tokenizers.sh)" >&2; exit 1; }
python3 - "$work/fortunes.jsonl" /usr/share/games/fortunes <<'PY'
import json, os, sys
out, src = sys.argv[1], sys.argv[2]
with open(out, "w") as f:
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if "." in name or not os.path.isfile(path):
            continue  # the .dat indexes and .u8 copies
        text = open(path, encoding="utf-8", errors="replace").read()
        for fortune in text.split("\n%\n"):
            fortune = fortune.strip()
            if fortune:
                f.write(json.dumps({"prompt": "Tell me a fortune.\n", "completion": fortune}) + "\n")
PY
go build -o "$work/train" ./cmd/train
common=(-model gpt -layers 6 -heads 6 -width 384 -context 256 -tokenizer "$tok" -data "$work/fortunes.jsonl"
  -steps "$steps" -eval-every 0 -val-split 0 -quiet)
export MEMFIT_CACHE="$work/cache"
printf '%-7s %-6s %12s %9s %12s\n' run round tokens/s padding peak
for r in $(seq 1 "$rounds"); do
  for mode in padded packed; do
    extra=(-batch 16)
    [ "$mode" = packed ] && extra=(-batch 4 -pack)
    "$work/train" "${common[@]}" "${extra[@]}" -summary "$work/$mode.json" >/dev/null
    python3 - "$work/$mode.json" "$mode" "$r" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print("%-7s %-6s %12.0f %9.3f %10.1fMiB" % (sys.argv[2], sys.argv[3], s["tokens_per_sec"], s.get("padding_fraction", 0), s["peak_bytes"]["total"] / 2**20))
PY
  done
done
