#!/usr/bin/env bash
# gpu-run.sh runs a memfit binary built elsewhere against the stub CUDA
# libraries (CONTRIBUTING.md, "Compile-checking the CUDA device") on a GPU
# machine: it links the names the binaries ask for (libcuda.so,
# libcublas.so, libnvrtc.so, libnccl.so) to the machine's real libraries in
# a temporary directory, puts that directory first in LD_LIBRARY_PATH and
# runs the command.
#
#   scripts/gpu-run.sh bin/stepbench -device cuda -steps 20
#
# CUDA_LIB (default /usr/local/cuda/lib64) is where libcublas and libnvrtc
# are looked for when ldconfig does not know them.
set -euo pipefail
if [ $# -eq 0 ]; then
  echo "usage: $0 COMMAND [ARG...]" >&2
  exit 2
fi
cuda_lib=${CUDA_LIB:-/usr/local/cuda/lib64}
libs=$(mktemp -d)
trap 'rm -rf "$libs"' EXIT

# find NAME prints the newest library called NAME.so* that ldconfig or
# $cuda_lib knows, or nothing.
find_lib() {
  local hit
  hit=$(ldconfig -p | awk -v n="$1" '$1 ~ "^"n"\\.so" {print $NF; exit}')
  if [ -z "$hit" ]; then
    hit=$(ls -1 "$cuda_lib/$1".so* 2>/dev/null | sort -V | tail -n 1 || true)
  fi
  printf '%s' "$hit"
}

for name in libcuda libcublas libnvrtc libnccl; do
  path=$(find_lib "$name")
  if [ -n "$path" ]; then
    ln -s "$path" "$libs/$name.so"
  elif [ "$name" != libnccl ]; then
    echo "$0: no $name on this machine (set CUDA_LIB to the toolkit's lib64)" >&2
    exit 1
  fi
done
export LD_LIBRARY_PATH="$libs:$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$@"
