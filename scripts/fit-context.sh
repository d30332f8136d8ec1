#!/usr/bin/env bash
# The longest context -fit finds a plan for (issue #33): Llama 3.1 8B's
# shape, LoRA rank 32 on every Linear layer over an nf4 base, batch 1,
# -amp bf16 -checkpoint every, planned for -device cuda (the budget is the
# GPU's; -fit chooses the rest: tiles, offloading, the optimizer's state),
# at each budget given (default 8, 12, 16, 24, 40, 48 and 80 GiB). For each budget
# the context doubles from START until -fit finds nothing, then a binary
# search narrows it to STEP tokens. Prints a markdown row per budget: the
# longest context found, the flags -fit chose there, its predicted peak,
# the host memory it offloads, and the reference's tokens at that budget (Unsloth's QLoRA table for
# Llama 3.1 8B, rank 32 on every linear layer, batch 1; plain Hugging Face
# with FlashAttention-2). Plans only: nothing is trained, nothing
# allocated. Each -fit's time goes to stderr.
#
# HOST=SIZE is the host memory -fit may use (-fit-host; default 120GiB,
# issue #44's host budget); HOST= (empty) leaves -fit-host out, so that
# -fit takes this machine's available memory as the host budget.
#
# SHAPE=70b plans Llama 3.1 70B's shape instead (80 blocks, width 8192,
# 64 heads over 8 key/value heads, SwiGLU 28672), with Unsloth's 70B
# figures as the reference (48 and 80 GB).
#
# INIT=DIR plans another model from its config.json (a directory holding
# it alone is enough: hf/testdata/configs has Qwen 3 8B's and Gemma 3
# 12B's), up to its max_position_embeddings; the reference columns are
# then empty.
set -euo pipefail
cd "$(dirname "$0")/.."
start=${START:-2048}
step=${STEP:-256}
budgets=("$@")
host=${HOST-120GiB}
hostflag=()
[ -z "$host" ] || hostflag=(-fit-host "$host")
[ ${#budgets[@]} -gt 0 ] || budgets=(8GiB 12GiB 16GiB 24GiB 40GiB 48GiB 80GiB)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/train" ./cmd/train
shape=(-model llama -layers 32 -heads 32 -kv-heads 8 -width 4096 -hidden 14336 -vocab 128256 -batch 1
  -lora 32 -amp bf16 -checkpoint every -base nf4 -device cuda)
if [ "${SHAPE:-8b}" = 70b ]; then
  shape=(-model llama -layers 80 -heads 64 -kv-heads 8 -width 8192 -hidden 28672 -vocab 128256 -batch 1
    -lora 32 -amp bf16 -checkpoint every -base nf4 -device cuda)
fi
if [ -n "${INIT:-}" ]; then
  shape=(-init "$INIT" -batch 1 -lora 32 -amp bf16 -checkpoint every -base nf4 -device cuda)
fi

# reference BUDGET prints Unsloth's and Hugging Face's tokens at BUDGET.
reference() {
  if [ -n "${INIT:-}" ]; then
    echo "- | -"
    return
  fi
  if [ "${SHAPE:-8b}" = 70b ]; then
    case $1 in
    48GiB) echo "12,106 | OOM" ;;
    80GiB) echo "89,389 | 6,916" ;;
    *) echo "- | -" ;;
    esac
    return
  fi
  case $1 in
  8GiB) echo "2,972 | OOM" ;;
  12GiB) echo "21,848 | 932" ;;
  16GiB) echo "40,724 | 2,551" ;;
  24GiB) echo "78,475 | 5,789" ;;
  40GiB) echo "153,977 | 12,264" ;;
  48GiB) echo "191,728 | -" ;;
  80GiB) echo "342,733 | about 28,000" ;;
  *) echo "- | -" ;;
  esac
}

# commas N writes N with thousands separated: 163,840.
commas() { sed -e ':a' -e 's/\([0-9]\)\([0-9]\{3\}\)\($\|,\)/\1,\2\3/' -e 'ta' <<<"$1"; }

# fit BUDGET CONTEXT runs -fit; on success it leaves the chosen flags and
# the predicted peak in $work/fit, and the plan's host memory (its host
# side's total, or 0 B) in $work/host.
fit() {
  local t0 t1 ok=0
  t0=$(date +%s.%N)
  if "$work/train" "${shape[@]}" -context "$2" -fit "$1" "${hostflag[@]}" -plan >"$work/out" 2>"$work/err"; then
    ok=1
    grep -m1 '^fit .*(predicted peak ' "$work/out" >"$work/fit"
    awk '/^host memory/ { h = 1 } h && /^total/ { print $2 " " $3; found = 1; exit } END { if (!found) print "0 B" }' "$work/out" >"$work/host"
  fi
  t1=$(date +%s.%N)
  printf '%s context %d: fits %d (%.1f s)\n' "$1" "$2" "$ok" "$(awk "BEGIN{print $t1 - $t0}")" >&2
  [ $ok = 1 ]
}

echo "| budget | longest context -fit finds | flags -fit chose | predicted peak | host memory | Unsloth QLoRA | Hugging Face + FA2 |"
echo "|---|---|---|---|---|---|---|"
for b in "${budgets[@]}"; do
  lo=0 hi=$start best="" besthost=""
  # Double until nothing fits.
  while fit "$b" "$hi"; do
    lo=$hi best=$(cat "$work/fit") besthost=$(cat "$work/host")
    hi=$((hi * 2))
  done
  # Narrow to STEP tokens: lo fits (or is 0), hi does not.
  while [ $((hi - lo)) -gt "$step" ]; do
    mid=$(((lo + hi) / 2 / step * step))
    [ "$mid" -gt "$lo" ] || mid=$((lo + step))
    if fit "$b" "$mid"; then
      lo=$mid best=$(cat "$work/fit") besthost=$(cat "$work/host")
    else
      hi=$mid
    fi
  done
  if [ "$lo" = 0 ]; then
    echo "| $b | none at $start | | | | $(reference "$b") |"
    continue
  fi
  # "fit 16.00 GiB: FLAGS (predicted peak 12.50 GiB)"
  flags=$(sed -e 's/^fit [^:]*: //' -e 's/ (predicted peak .*//' <<<"$best")
  peak=$(sed -e 's/.*(predicted peak \(.*\))$/\1/' <<<"$best")
  printf '| %s | %s | `%s` | %s | %s | %s |\n' "$b" "$(commas "$lo")" "$flags" "$peak" "$besthost" "$(reference "$b")"
done
