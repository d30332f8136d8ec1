#!/usr/bin/env bash
# gpu-run.sh is memfit's GPU check in one call: on a machine with an NVIDIA
# GPU it runs the kernel conformance suite (device/cuda), the technique
# suite (train's TestTechniquesMatchCPU) and the GPU benchmarks of
# cmd/stepbench beside PyTorch's (scripts/torch_gpu_ref.py), in that order,
# each under a time limit (under 8 minutes in all), and prints one table.
#
#   scripts/gpu-run.sh build    # on a machine with Go: the binaries, into bin/gpu
#                               # (also train, for scripts/gpu-8b.sh)
#   scripts/gpu-run.sh          # on the GPU machine: everything, one table
#   scripts/gpu-run.sh exec CMD [ARG...]   # one command with the libraries linked
#   scripts/gpu-run.sh unpack DIR NAME...  # build's binaries NAME, unpacked into DIR
#
# The GPU machine needs no Go and no network. Where Go is missing (or
# cannot build offline) it runs the binaries of `build`, made elsewhere
# against stub libraries (CONTRIBUTING.md, "Compile-checking the CUDA
# device"): they ask for libcuda.so, libcublas.so, libcublasLt.so,
# libnvrtc.so and libnccl.so by those names, and the script links the
# names to the machine's own libraries (the driver's libcuda, the others
# from ldconfig, $CUDA_LIB, /usr/local/cuda or the Python packages
# PyTorch ships) in a temporary directory first in
# LD_LIBRARY_PATH. Where Go can build there, it builds against the
# machine's toolkit instead.
#
# With the device tool: build here, then
#   run(command="scripts/gpu-run.sh", carry=["bin/gpu"], timeout_s=540)
# $OUT, when set, receives the logs and the table (table.md).
#
# Environment: MEMFIT_GPU_BIN (default bin/gpu), MEMFIT_GPU_STEPS (20),
# MEMFIT_GPU_CONFIGS (mlp_fp32,gpt_fp32,gpt_bf16), CUDA_LIB, and for build:
# CUDA_INCLUDE (CUDA 12 headers: /usr/local/cuda/include, else
# /tmp/cuda/include) and CUDA_STUBS (stub libraries: /tmp/cuda/lib64,
# made from the headers when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bin=${MEMFIT_GPU_BIN:-bin/gpu}
steps=${MEMFIT_GPU_STEPS:-20}
configs=${MEMFIT_GPU_CONFIGS:-mlp_fp32,gpt_fp32,gpt_bf16}
binaries="cuda.test train.test stepbench"

die() {
  echo "gpu-run.sh: $*" >&2
  exit 1
}

# ---------------------------------------------------------------- build

# make_stubs INCLUDE DIR writes stub libraries for the names the headers
# declare (CONTRIBUTING.md's recipe): enough to link, and to behave like a
# machine without a GPU when run.
make_stubs() {
  local inc=$1 dir=$2 lib hdr re
  mkdir -p "$dir"
  for spec in 'libcuda cuda.h cu' 'libcublas cublas_v2.h cublas' 'libcublasLt cublasLt.h cublasLt' \
    'libnvrtc nvrtc.h nvrtc' 'libnccl nccl.h p?nccl'; do
    read -r lib hdr re <<<"$spec"
    [ -f "$inc/$hdr" ] || die "no $hdr in $inc (CONTRIBUTING.md says where the headers come from)"
    gcc -E -P -I"$inc" "$inc/$hdr" 2>/dev/null | grep -oE "\b$re[A-Z][A-Za-z0-9_]*[[:space:]]*\(" | tr -d '( \t' | sort -u |
      sed 's/.*/int &(void) { return 100; }/' >"$dir/$lib.c"
    gcc -shared -fPIC -o "$dir/$lib.so" "$dir/$lib.c"
  done
}

build() {
  command -v go >/dev/null || die "build needs Go"
  local inc=${CUDA_INCLUDE:-} stubs=${CUDA_STUBS:-}
  if [ -z "$inc" ]; then
    for d in /usr/local/cuda/include /tmp/cuda/include; do
      if [ -f "$d/cuda.h" ]; then inc=$d && break; fi
    done
  fi
  [ -n "$inc" ] || die "no CUDA headers: set CUDA_INCLUDE (CONTRIBUTING.md, \"Compile-checking the CUDA device\")"
  stubs=${stubs:-/tmp/cuda/lib64}
  if [ ! -f "$stubs/libcublasLt.so" ] || [ ! -f "$stubs/libnccl.so" ]; then
    echo "making stub libraries in $stubs from $inc"
    make_stubs "$inc" "$stubs"
  fi
  mkdir -p "$bin"
  export CGO_ENABLED=1 CGO_CFLAGS="-I$inc" CGO_LDFLAGS="-L$stubs"
  local flags=(-tags cuda -trimpath -ldflags='-s -w')
  go test "${flags[@]}" -c -o "$bin/cuda.test" ./device/cuda/
  go test "${flags[@]}" -c -o "$bin/train.test" ./train/
  go build "${flags[@]}" -o "$bin/stepbench" ./cmd/stepbench
  # For scripts/gpu-8b.sh: the train command.
  go build "${flags[@]}" -o "$bin/train" ./cmd/train
  for b in $binaries train; do gzip -f -9 "$bin/$b"; done
  git rev-parse HEAD >"$bin/commit" 2>/dev/null || true
  (git status --porcelain 2>/dev/null | grep -q .) && echo "(with uncommitted changes)" >>"$bin/commit"
  ls -l "$bin"
}

# ---------------------------------------------------------------- libraries

# find_lib NAME prints the newest library NAME.so* that ldconfig,
# $CUDA_LIB, the CUDA toolkit or PyTorch's packages hold, or nothing.
find_lib() {
  local hit dirs d
  hit=$(ldconfig -p 2>/dev/null | awk -v n="$1" '$1 ~ "^"n"\\.so" {print $NF; exit}')
  if [ -z "$hit" ]; then
    dirs="${CUDA_LIB:-} /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu"
    if command -v python3 >/dev/null; then
      # pip's nvidia-* packages (what PyTorch loads): site-packages/nvidia/*/lib.
      dirs="$dirs $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in sorted(os.listdir(p))))' 2>/dev/null || true)"
    fi
    for d in $dirs; do
      hit=$(ls -1 "$d/$1".so* 2>/dev/null | sort -V | tail -n 1 || true)
      if [ -n "$hit" ]; then break; fi
    done
  fi
  printf '%s' "$hit"
}

link_libs() {
  libs=$(mktemp -d)
  local extra="" name path
  for name in libcuda libcublas libcublasLt libnvrtc libnccl; do
    path=$(find_lib "$name")
    if [ -z "$path" ]; then
      case $name in
      libcuda) die "no libcuda (the NVIDIA driver's library) on this machine: is it a GPU machine?" ;;
      *) die "no $name on this machine (set CUDA_LIB to the directory holding it)" ;;
      esac
    fi
    ln -s "$path" "$libs/$name.so"
    extra="$extra:$(dirname "$path")" # NVRTC loads its builtins library from beside it
  done
  export LD_LIBRARY_PATH="$libs$extra${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# ---------------------------------------------------------------- binaries

# binaries_ready puts the test binaries and stepbench in $exe: built here
# when Go can build offline against this machine's toolkit, else
# unpacked from $bin.
binaries_ready() {
  exe=$(mktemp -d)
  if command -v go >/dev/null && [ -f /usr/local/cuda/include/cuda.h ] &&
    GOFLAGS=-mod=mod GOPROXY=off go list -tags cuda ./device/cuda/ >/dev/null 2>&1; then
    echo "building with $(go version) against /usr/local/cuda"
    export CGO_ENABLED=1 CGO_CFLAGS=-I/usr/local/cuda/include \
      CGO_LDFLAGS="-L/usr/local/cuda/lib64 -L/usr/local/cuda/lib64/stubs -L$libs"
    if GOPROXY=off go test -tags cuda -c -o "$exe/cuda.test" ./device/cuda/ &&
      GOPROXY=off go test -tags cuda -c -o "$exe/train.test" ./train/ &&
      GOPROXY=off go build -tags cuda -o "$exe/stepbench" ./cmd/stepbench; then
      built="built here"
      return
    fi
    echo "building here failed; trying $bin" >&2
  fi
  # shellcheck disable=SC2086 # $binaries is a list of names
  unpack "$exe" $binaries
  built="$bin, built at $(head -c 12 "$bin/commit" 2>/dev/null || echo '?') $(sed -n 2p "$bin/commit" 2>/dev/null || true)"
}

# unpack DIR NAME... puts each binary NAME of build's $bin into DIR,
# executable (gpu-8b.sh calls it too: `gpu-run.sh unpack`).
unpack() {
  local dir=$1 b
  shift
  for b in "$@"; do
    if [ -f "$bin/$b.gz" ]; then
      gunzip -c "$bin/$b.gz" >"$dir/$b"
    elif [ -f "$bin/$b" ]; then
      cp "$bin/$b" "$dir/$b"
    else
      die "no $bin/$b(.gz): run 'scripts/gpu-run.sh build' on a machine with Go and bring $bin along (the device tool: carry [\"$bin\"])"
    fi
    chmod +x "$dir/$b"
  done
}

# ---------------------------------------------------------------- the run

# stage NAME SECONDS CMD... runs one stage under a time limit, its output
# in $logs/NAME.log, and records its status.
stage() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS rc=0
  echo "== $name (at most ${limit}s): $*"
  timeout --kill-after=10 "$limit" "$@" >"$logs/$name.log" 2>&1 || rc=$?
  # A test binary without a usable driver skips every test and exits 0.
  if grep -q 'skipping every CUDA test' "$logs/$name.log"; then rc=200; fi
  local took=$((SECONDS - t0))
  tail -n 3 "$logs/$name.log"
  echo "$name $rc $took" >>"$logs/status"
}

run_all() {
  command -v timeout >/dev/null || die "needs timeout (coreutils)"
  link_libs
  binaries_ready
  logs=$(mktemp -d)
  : >"$logs/status"
  {
    date -u '+%Y-%m-%d %H:%M UTC'
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not available"
    echo "binaries: $built"
    echo "libraries: $(readlink "$libs"/*.so | tr '\n' ' ')"
  } >"$logs/machine"
  cat "$logs/machine"
  # The suites read testdata relative to their packages.
  stage conformance 100 bash -c "cd '$root/device/cuda' && exec '$exe/cuda.test' -test.v -test.count 1 -test.timeout 95s"
  stage benchmark 110 "$exe/stepbench" -device cuda -steps "$steps" -warmup 3 -configs "$configs"
  # The fused attention against its composition (GEMMs, softmax, causal
  # fill), alternated: the ratio says whether the tiled kernels pay.
  stage attention 60 "$exe/stepbench" -device cuda -steps 10 -warmup 2 -configs gpt_fp32,gpt_bf16 -compare attention -rounds 3
  if command -v python3 >/dev/null && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    stage pytorch 80 python3 scripts/torch_gpu_ref.py --steps "$steps" --configs "$configs"
  else
    echo "pytorch 127 0" >>"$logs/status"
    echo "no python3 with a CUDA PyTorch: PyTorch's column stays empty" >"$logs/pytorch.log"
  fi
  stage techniques 120 bash -c "cd '$root/train' && exec '$exe/train.test' -test.run '^TestTechniquesMatchCPU\$' -test.v -test.count 1 -test.timeout 115s"
  report | tee "$logs/table.md"
  if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
    cp "$logs"/machine "$logs"/*.log "$logs"/table.md "$OUT"/ 2>/dev/null || true
  fi
  ! awk '$1 != "pytorch" && $2 != 0 {bad=1} END {exit !bad}' "$logs/status"
}

# report prints the suites' results and the benchmark table.
report() {
  echo
  echo "## memfit on the GPU ($(sed -n 1p "$logs/machine"))"
  echo
  sed -n '2,$p' "$logs/machine" | sed 's/^/    /'
  echo
  echo "| stage | result | seconds |"
  echo "|---|---|---|"
  while read -r name rc took; do
    local res=PASS
    case $rc in
    0) ;;
    124 | 137) res="TIMED OUT" ;;
    127) res="not run" ;;
    200) res="SKIPPED: no usable CUDA driver" ;;
    *) res="FAIL (exit $rc)" ;;
    esac
    if [ "$name" = conformance ] || [ "$name" = techniques ]; then
      local n f
      n=$(grep -c '^--- PASS' "$logs/$name.log" || true)
      f=$(grep -E '^\s*--- FAIL' "$logs/$name.log" | head -n 5 | sed 's/^ *--- FAIL: //; s/ (.*//' | tr '\n' ' ' || true)
      res="$res, $n tests passed${f:+; failed: $f}"
    fi
    echo "| $name | $res | $took |"
  done <"$logs/status"
  echo
  if command -v python3 >/dev/null; then
    python3 - "$logs/benchmark.log" "$logs/pytorch.log" "$logs/attention.log" <<'PY'
import json, sys
def rows(path):
    out = {}
    for line in open(path, errors="replace"):
        line = line.strip()
        if line.startswith("{"):
            try:
                x = json.loads(line)
                out[x["config"]] = x
            except (ValueError, KeyError):
                pass
    return out
m, t = rows(sys.argv[1]), rows(sys.argv[2])
mib = lambda b: "%.1f MiB" % (b / 2**20) if b else ""
print("| configuration | memfit | PyTorch | memfit / PyTorch | memfit peak (allocator) | PyTorch max_memory_allocated |")
print("|---|---|---|---|---|---|")
for c in list(m) + [c for c in t if c not in m]:
    a, b = m.get(c, {}), t.get(c, {})
    am, bm = a.get("median_ms"), b.get("median_ms")
    ratio = "%.2f" % (am / bm) if am and bm else ""
    print("| %s | %s | %s | %s | %s | %s |" % (c, "%.2f ms" % am if am else "", "%.2f ms" % bm if bm else "", ratio,
          mib(a.get("peak_total_bytes")), mib(b.get("peak_allocated_bytes"))))
for line in open(sys.argv[3], errors="replace"):
    if line.startswith("{"):
        try:
            x = json.loads(line)
            print("\n%s: fused attention %.2f ms, composed %.2f ms (ratio %.2f, median of %d alternations)" % (
                x["config"], x["median_ms"], x["median_ms_without"], x["ratio"], x["rounds"]), end="")
        except (ValueError, KeyError):
            pass
print()
dev = next((x.get("device") for x in t.values() if x.get("device")), None)
if dev:
    print("\nPyTorch %s on %s; median of %s timed steps each." % (next(iter(t.values())).get("torch"), dev, next(iter(t.values())).get("timed_steps")))
PY
  else
    echo "(no python3 for the table: the raw lines)"
    grep '^{' "$logs/benchmark.log" "$logs/pytorch.log" || true
  fi
}

case ${1:-run} in
build) build ;;
run) run_all ;;
unpack)
  shift
  [ $# -gt 1 ] || die "usage: $0 unpack DIR NAME..."
  unpack "$@"
  ;;
exec)
  shift
  [ $# -gt 0 ] || die "usage: $0 exec COMMAND [ARG...]"
  link_libs
  exec "$@"
  ;;
*)
  # The old form, gpu-run.sh COMMAND [ARG...]: exec.
  command -v "$1" >/dev/null || die "usage: $0 [build | run | exec COMMAND [ARG...] | unpack DIR NAME...]"
  link_libs
  exec "$@"
  ;;
esac
