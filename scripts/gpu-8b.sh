#!/usr/bin/env bash
# gpu-8b.sh measures memfit's Llama 3.1 8B-shaped QLoRA step and a plain
# PyTorch bf16 LoRA step of the same shape (scripts/torch_lora_ref.py) in
# one GPU call, and writes the record benchmarks/gpu-8b.json from what the
# runs wrote (issue #45, items 6 and 7): never typed by hand.
#
#   scripts/gpu-run.sh build      # here: bin/gpu, with train
#   scripts/gpu-8b.sh             # on the GPU machine, from the repository's root
#   SHAPE=tiny scripts/gpu-8b.sh  # anywhere, on the CPU: a tiny shape, end to end
#
# With the device tool: build here, then
#   run(command="scripts/gpu-8b.sh", carry=["bin/gpu"], timeout_s=590)
# and copy the returned gpu-8b.json into benchmarks/.
#
# The workload: 32 blocks, width 4096, 32 heads, 8 key/value heads, SwiGLU
# hidden 14336, vocabulary 128256 (untied head), batch 1, context 8192,
# LoRA rank 32 on every Linear of the blocks (q, k, v, o, gate, up, down),
# random weights, bf16 autocast, every block checkpointed. memfit's base
# is nf4 (-base nf4 -tile 2048 -offload activations: the run of
# BENCHMARKS.md); PyTorch's is bf16, unquantized, with SDPA attention.
# In order, each under a time limit, all of them cut so that the record
# is written within MEMFIT_8B_TOTAL_S (560) seconds (about 7 minutes on
# an H100; give the device tool's call 590 s): a part with too little
# time left is skipped and its fields stay null.
#
#   1. plan: `train -plan -summary` (the table, in the logs, and the same
#      plan to the byte): plan_device_bytes, the predicted peak.
#   2. memfit, cold: `train ... -steps N -summary -metrics`, a fresh
#      process with empty kernel caches (MEMFIT_CUDA_CACHE and the
#      driver's CUDA_CACHE_PATH in a new directory), as on a machine
#      memfit never ran on. memfit_tokens_per_s: the median over steps
#      2..N of each step's trained tokens over its time (the metrics'
#      samples_per_sec: the step alone, its data already loaded).
#      peak_device_bytes: the run's allocator peak (the summary's
#      peak_bytes.total, what the plan predicts). first_contact_cold_s:
#      seconds from launching the process to the first step's line in
#      the metrics file (written as that step ends; polled every 0.1 s):
#      building the model from random weights, quantizing it to nf4,
#      compiling and loading the kernels, and one whole step.
#   3. torch: scripts/torch_lora_ref.py with the same shape and steps;
#      torch_bf16_lora_tokens_per_s, the median over steps 2..N.
#   4. memfit, warm: the same process again for one step, with the kernel
#      caches the cold run filled (memfit's cubin cache, device/cuda's
#      kernelCache): first_contact_s, the issue's "a fresh process reaches
#      its first step with a warm cache".
#   5. profile: `stepbench -kernels` over one step after one, warm: the
#      GPU's time in each kernel, product and copy from timing events,
#      grouped (dequantization, LoRA's and the base's products, attention,
#      copies, the GPU waiting for the host) with the host's waits and how
#      the kernels were loaded, in profile.txt (issue #45, item 1).
#   6. base streamed: the cold run's flags with -offload activations,base
#      (issue #44's GPU step), planned, then run for N steps under
#      -mem-limit of the plan's reserve plus 1%: "offload_base" in the
#      record, its tokens per second beside the resident base's (part 2),
#      its allocator peak beside the plan's.
#
# The record has the issue's fields: device (nvidia-smi's name), shape
# {layers, width, context, lora_rank, base}, memfit_tokens_per_s,
# torch_bf16_lora_tokens_per_s, first_contact_s (warm),
# peak_device_bytes and plan_device_bytes, and first_contact_cold_s and
# offload_base (part 6) beside them; a part that failed leaves its fields null and the
# script exits 1. $OUT, when set, receives the record and every log
# (gpu-8b.log: commit, date, versions and the raw lines; profile.txt).
#
# SHAPE=tiny: 2 blocks of width 64 (4 heads, 2 key/value heads, hidden
# 128, vocabulary 256), context 256, rank 4, 3 steps, without -tile (a
# tile needs 2048 tokens and more in a step), memfit on -device cpu built
# here with Go, PyTorch on the CPU; the record is gpu-8b.tiny.json in $OUT
# (or a temporary directory), never in benchmarks/.
#
# Environment: SHAPE (8b or tiny), MEMFIT_8B_STEPS (4; tiny 3),
# MEMFIT_8B_CONTEXT (8192; tiny 256), MEMFIT_8B_TILE (2048; tiny 0: off),
# MEMFIT_8B_RECORD (the record's path), MEMFIT_GPU_BIN (bin/gpu), PYTHON (a python with PyTorch; else the first
# of python3, /usr/bin/python3 and python that has it, with CUDA on the
# GPU), and the time limits in seconds MEMFIT_8B_PLAN_S (30, each of two),
# MEMFIT_8B_MEMFIT_S (300), MEMFIT_8B_TORCH_S (100), MEMFIT_8B_WARM_S (120),
# MEMFIT_8B_PROFILE_S (150), MEMFIT_8B_BASE_S (200) and MEMFIT_8B_TOTAL_S
# (560).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${MEMFIT_GPU_BIN:-bin/gpu}
shape=${SHAPE:-8b}
work=$(mktemp -d)
logs=$work/logs
mkdir -p "$logs"
# The binaries and kernel caches go at exit; the logs (and a tiny record
# without $OUT) stay.
trap 'rm -rf "$work/bin" "$work/ptx" "$work/nvcache"' EXIT

die() {
  echo "gpu-8b.sh: $*" >&2
  exit 1
}

case $shape in
8b)
  layers=32 heads=32 kv=8 width=4096 hidden=14336 vocab=128256 rank=32
  steps=${MEMFIT_8B_STEPS:-4} context=${MEMFIT_8B_CONTEXT:-8192} tile=${MEMFIT_8B_TILE:-2048}
  device=cuda record=${MEMFIT_8B_RECORD:-benchmarks/gpu-8b.json}
  ;;
tiny)
  layers=2 heads=4 kv=2 width=64 hidden=128 vocab=256 rank=4
  steps=${MEMFIT_8B_STEPS:-3} context=${MEMFIT_8B_CONTEXT:-256} tile=${MEMFIT_8B_TILE:-0}
  device=cpu record=${MEMFIT_8B_RECORD:-${OUT:-$work}/gpu-8b.tiny.json}
  ;;
*) die "SHAPE is 8b or tiny, not $shape" ;;
esac
[ "$steps" -ge 1 ] || die "MEMFIT_8B_STEPS must be at least 1"
warmup=$((steps > 1 ? 1 : 0))
command -v timeout >/dev/null || die "needs timeout (coreutils)"

# ---------------------------------------------------------------- binaries

exe=$work/bin
mkdir -p "$exe"
if [ "$device" = cpu ]; then
  command -v go >/dev/null || die "SHAPE=tiny builds train with Go"
  go build -o "$exe/train" ./cmd/train
  go build -o "$exe/stepbench" ./cmd/stepbench
  built="built here with $(go version | cut -d' ' -f3)"
  memfit=("$exe/train")
  stepbench=("$exe/stepbench")
else
  MEMFIT_GPU_BIN=$bin scripts/gpu-run.sh unpack "$exe" train stepbench
  built="$bin, built at $(head -c 12 "$bin/commit" 2>/dev/null || echo '?') $(sed -n 2p "$bin/commit" 2>/dev/null || true)"
  # The libraries the cuda build asks for, linked by gpu-run.sh.
  memfit=(scripts/gpu-run.sh exec "$exe/train")
  stepbench=(scripts/gpu-run.sh exec "$exe/stepbench")
fi

# A python with PyTorch (with CUDA for the GPU run), and one for the record.
torch_check='import torch'
[ "$device" = cuda ] && torch_check='import torch; assert torch.cuda.is_available()'
tpy=
for p in ${PYTHON:-} python3 /usr/bin/python3 python; do
  if command -v "$p" >/dev/null 2>&1 && "$p" -c "$torch_check" >/dev/null 2>&1; then
    tpy=$p
    break
  fi
done
py=$tpy
if [ -z "$py" ]; then
  for p in python3 /usr/bin/python3 python; do
    if command -v "$p" >/dev/null 2>&1; then py=$p && break; fi
  done
fi
[ -n "$py" ] || die "no python3 to write the record with"

flags=(-model llama -layers "$layers" -heads "$heads" -kv-heads "$kv" -width "$width" -hidden "$hidden"
  -vocab "$vocab" -batch 1 -lora "$rank" -amp bf16 -checkpoint every -offload activations -base nf4
  -device "$device" -context "$context" -quiet -eval-every 0 -val-split 0)
if [ "$tile" != 0 ]; then flags+=(-tile "$tile"); fi

dirty=
if git status --porcelain 2>/dev/null | grep -q .; then dirty=" (with uncommitted changes)"; fi
{
  echo "gpu-8b.sh SHAPE=$shape, $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo '?')$dirty"
  echo "binaries: $built"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not available"
  echo "python with PyTorch: ${tpy:-none}"
  echo "memfit flags: ${flags[*]}"
} >"$logs/gpu-8b.log"
cat "$logs/gpu-8b.log"
: >"$logs/status"

# within LIMIT prints LIMIT, or less, so that every part ends, and the
# record is written, by MEMFIT_8B_TOTAL_S (560) seconds from the start
# (a device call's limit would otherwise kill the script before its
# record); 0 when too little is left to start a part.
within() {
  local left=$((${MEMFIT_8B_TOTAL_S:-560} - SECONDS - 20))
  if [ "$left" -lt 10 ]; then
    echo 0
  elif [ "$1" -lt "$left" ]; then
    echo "$1"
  else
    echo "$left"
  fi
}

# part NAME RC SECONDS records one part's outcome.
part() {
  echo "$1 $2 $3" >>"$logs/status"
  echo "== $1: exit $2 after ${3}s"
}

# ---------------------------------------------------------------- 1. plan

t=$SECONDS rc=0
echo "== plan (at most ${MEMFIT_8B_PLAN_S:-30}s)"
# The table, for the logs; -summary, the same plan to the byte, for the record.
timeout --kill-after=10 "${MEMFIT_8B_PLAN_S:-30}" "${memfit[@]}" "${flags[@]}" -plan -summary "$logs/plan.json" >"$logs/plan.txt" 2>&1 || rc=$?
cat "$logs/plan.txt"
[ "$rc" != 0 ] || cat "$logs/plan.json"
part plan "$rc" $((SECONDS - t))

# ---------------------------------------------------------------- 2. memfit

# timed_run NAME LIMIT STEPS [FLAG...] runs memfit's step (with the flags
# after STEPS last) for STEPS steps under the kernel caches in $work/ptx
# and $work/nvcache, logging to NAME.log and NAME.csv, and sets
# first_contact to the seconds from its launch to the first step's line
# in the metrics file (written as that step ends; polled every 0.1 s).
timed_run() {
  local name=$1 limit=$2 n=$3 pid first t0 t1
  shift 3
  local metrics=$logs/$name.csv
  first_contact= rc=0 first=
  t0=$(date +%s.%N)
  MEMFIT_CUDA_CACHE=$work/ptx CUDA_CACHE_PATH=$work/nvcache \
    timeout --kill-after=10 "$limit" "${memfit[@]}" "${flags[@]}" -steps "$n" "$@" \
    -summary "$logs/$name.json" -metrics "$metrics" >"$logs/$name.log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if grep -q '^1,' "$metrics" 2>/dev/null; then
      first=$(date +%s.%N)
      break
    fi
    sleep 0.1
  done
  wait "$pid" || rc=$?
  t1=$(date +%s.%N)
  # A run that ended between two polls: its end bounds the first step's.
  if [ -z "$first" ] && grep -q '^1,' "$metrics" 2>/dev/null; then first=$t1; fi
  if [ -n "$first" ]; then first_contact=$(awk -v a="$t0" -v b="$first" 'BEGIN {printf "%.1f", b - a}'); fi
  tail -n 5 "$logs/$name.log"
  echo "process: $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}') s in all; first step's end at ${first_contact:-?} s" | tee -a "$logs/$name.log"
}

# Cold: empty kernel caches, as on a machine memfit never ran on.
lim=$(within "${MEMFIT_8B_MEMFIT_S:-300}")
echo "== memfit, cold (at most ${lim}s): ${memfit[*]} ${flags[*]} -steps $steps"
mkdir -p "$work/ptx" "$work/nvcache"
t=$SECONDS rc=124 first_contact=
[ "$lim" = 0 ] || timed_run memfit "$lim" "$steps"
first_contact_cold=$first_contact
part memfit "$rc" $((SECONDS - t))

# ---------------------------------------------------------------- 3. torch

t=$SECONDS rc=0 lim=$(within "${MEMFIT_8B_TORCH_S:-100}")
if [ -n "$tpy" ] && [ "$lim" != 0 ]; then
  echo "== torch (at most ${lim}s): $tpy scripts/torch_lora_ref.py"
  timeout --kill-after=10 "$lim" "$tpy" scripts/torch_lora_ref.py --device "$device" \
    --layers "$layers" --width "$width" --heads "$heads" --kv-heads "$kv" --hidden "$hidden" --vocab "$vocab" \
    --context "$context" --batch 1 --rank "$rank" --steps "$steps" --warmup "$warmup" --checkpoint every \
    >"$logs/torch.log" 2>&1 || rc=$?
  tail -n 3 "$logs/torch.log"
elif [ "$lim" = 0 ]; then
  rc=124
  echo "no time left for torch: its column stays null" | tee "$logs/torch.log"
else
  rc=127
  echo "no python with PyTorch$([ "$device" = cuda ] && echo ' and CUDA'): its column stays null" | tee "$logs/torch.log"
fi
part torch "$rc" $((SECONDS - t))

# ---------------------------------------------------------------- 4. warm

# Warm: a new process with the kernel caches the cold run filled
# (memfit's own cubin cache; the driver's too), one step: the issue's
# first contact, "a fresh process reaches its first step with a warm
# cache".
lim=$(within "${MEMFIT_8B_WARM_S:-120}")
echo "== memfit, warm (at most ${lim}s): -steps 1"
t=$SECONDS rc=124 first_contact=
[ "$lim" = 0 ] || timed_run warm "$lim" 1
first_contact_warm=$first_contact
part warm "$rc" $((SECONDS - t))

# ---------------------------------------------------------------- 5. profile

# The GPU's time per kernel, product and copy of one step (stepbench
# -kernels: timing events around each; on the CPU, each kernel's wall
# time), grouped as issue #45 asks, into profile.txt.
t=$SECONDS rc=124 lim=$(within "${MEMFIT_8B_PROFILE_S:-150}")
echo "== profile (at most ${lim}s): stepbench -kernels, one step after one"
[ "$lim" = 0 ] || rc=0
[ "$lim" = 0 ] || MEMFIT_CUDA_CACHE=$work/ptx CUDA_CACHE_PATH=$work/nvcache \
  timeout --kill-after=10 "$lim" "${stepbench[@]}" -device "$device" -kernels -configs gpt_bf16 \
  -steps 1 -warmup 1 -with "${flags[*]}" >"$logs/profile.json" 2>"$logs/profile.txt" || rc=$?
head -n 40 "$logs/profile.txt" 2>/dev/null || true
part profile "$rc" $((SECONDS - t))

# ---------------------------------------------------------------- 6. base streamed

# Issue #44's GPU step: the same run with the frozen base streamed from
# host memory (-offload activations,base), its plan first, then the run
# under -mem-limit of the caching allocator's reserve that plan predicts
# (plus 1%: the step must fit the memory the plan says, not the whole
# card; on the CPU the host's side too), against the cold run's
# tokens per second (the base resident). Recorded under "offload_base".
t=$SECONDS rc=124 lim=$(within "${MEMFIT_8B_PLAN_S:-30}")
echo "== base streamed (at most ${lim}s, then $(within "${MEMFIT_8B_BASE_S:-200}")s): -offload activations,base"
[ "$lim" = 0 ] || rc=0
[ "$lim" = 0 ] || timeout --kill-after=10 "$lim" "${memfit[@]}" "${flags[@]}" -offload activations,base \
  -plan -summary "$logs/plan-base.json" >"$logs/plan-base.txt" 2>&1 || rc=$?
limit=
lim=$(within "${MEMFIT_8B_BASE_S:-200}")
if [ "$rc" = 0 ] && [ "$lim" = 0 ]; then
  rc=124
elif [ "$rc" = 0 ]; then
  # On the CPU the host's side comes out of the same memory (-mem-limit
  # counts both there).
  limit=$("$py" -c 'import json, sys; p = json.load(open(sys.argv[1]))["peak_bytes"]; print(int((p["reserved"] + (p.get("host_total", 0) if sys.argv[2] == "cpu" else 0)) * 1.01) + 1)' "$logs/plan-base.json" "$device")
  timed_run base "$lim" "$steps" -offload activations,base -mem-limit "$limit"
fi
part base "$rc" $((SECONDS - t))

# ---------------------------------------------------------------- the record

if [ "$device" = cuda ]; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 || true)
else
  gpu="cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1 || true)"
fi
mkdir -p "$(dirname "$record")"
"$py" - "$logs" "$record" "$gpu" "$first_contact_warm" "$first_contact_cold" "$layers" "$width" "$context" "$rank" "$limit" <<'PY'
import csv, json, os, statistics, sys
logs, record, gpu, first, first_cold, layers, width, context, rank, limit = sys.argv[1:]
status = {}
for line in open(os.path.join(logs, "status")):
    name, rc, _ = line.split()
    status[name] = int(rc)

def load(path, parse):
    try:
        with open(os.path.join(logs, path)) as f:
            return parse(f)
    except (OSError, ValueError, KeyError):
        return None

def last_json(f):
    rows = [json.loads(l) for l in f if l.startswith("{")]
    return rows[-1] if rows else None

# memfit: each step's trained tokens over its time (batch 1: samples_per_sec
# is one over the step's seconds), the first step left out when there are more.
def tokens_per_s(name):
    rows = load(name + ".csv", lambda f: list(csv.DictReader(f))) or []
    rates = [float(r["trained_tokens"]) * float(r["samples_per_sec"]) for r in rows]
    return rows, rates, (statistics.median(rates[1:] or rates) if rates and status.get(name) == 0 else None)

rows, rates, memfit = tokens_per_s("memfit")
summary = load("memfit.json", json.load) if status.get("memfit") == 0 else None
peak = summary["peak_bytes"]["total"] if summary else None
plan = load("plan.json", json.load) if status.get("plan") == 0 else None
torch = load("torch.log", last_json) if status.get("torch") == 0 else None
out = {
    "device": gpu or (torch or {}).get("device") or None,
    "shape": {"layers": int(layers), "width": int(width), "context": int(context), "lora_rank": int(rank), "base": "nf4"},
    "memfit_tokens_per_s": round(memfit, 2) if memfit else None,
    "torch_bf16_lora_tokens_per_s": round(torch["tokens_per_s"], 2) if torch else None,
    "first_contact_s": float(first) if first and status.get("warm") == 0 else None,
    "first_contact_cold_s": float(first_cold) if first_cold and status.get("memfit") == 0 else None,
    "peak_device_bytes": peak,
    "plan_device_bytes": plan["peak_bytes"]["total"] if plan else None,
}
# Issue #44: the same step with the base streamed from the host.
_, _, base = tokens_per_s("base")
base_summary = load("base.json", json.load) if status.get("base") == 0 else None
base_plan = load("plan-base.json", json.load)
out["offload_base"] = {
    "tokens_per_s": round(base, 2) if base else None,
    "resident_tokens_per_s": out["memfit_tokens_per_s"],
    "peak_device_bytes": base_summary["peak_bytes"]["total"] if base_summary else None,
    "plan_device_bytes": base_plan["peak_bytes"]["total"] if base_plan else None,
    "plan_reserved_bytes": base_plan["peak_bytes"]["reserved"] if base_plan else None,
    "plan_host_bytes": base_plan["peak_bytes"].get("host_total") if base_plan else None,
    "mem_limit_bytes": int(limit) if limit else None,
}
with open(record, "w") as f:
    json.dump(out, f, indent=2)
    f.write("\n")
print(json.dumps(out, indent=2))
if memfit:
    print("memfit: %d steps, per step %s s; summary %s" % (len(rates), ", ".join("%.2f" % (float(r["trained_tokens"]) / x) for r, x in zip(rows, rates)),
          json.dumps({k: summary[k] for k in ("final_loss", "tokens_per_sec", "peak_rss_bytes") if k in summary}) if summary else "-"))
if torch:
    print("torch: %s, attention %s, step %.2f s, peak %s bytes, loss %.4f -> %.4f, build %.1f s" % (
        torch.get("torch"), torch.get("attention"), torch["step_s"], torch.get("peak_bytes"), torch["loss_first"], torch["loss_last"], torch["build_s"]))
if memfit and torch:
    print("memfit / PyTorch bf16 LoRA tokens per second: %.3f" % (memfit / torch["tokens_per_s"]))
PY
echo "record: $record"
grep -h '^{' "$logs/torch.log" >>"$logs/gpu-8b.log" 2>/dev/null || true
cat "$logs/status" >>"$logs/gpu-8b.log"
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
  cp "$logs"/* "$OUT"/ 2>/dev/null || true
  [ "$record" -ef "$OUT/$(basename "$record")" ] || cp "$record" "$OUT"/
fi
! awk '$2 != 0 {bad=1} END {exit !bad}' "$logs/status"
