#!/usr/bin/env bash
# gpu-compare.sh times an earlier build's GPU step against this one on the
# same GPU, alternated, and breaks this build's fp32 step down per kernel
# with Nsight Compute: what BENCHMARKS.md's "issue #36 finished" tables
# came from.
#
#   scripts/gpu-compare.sh OLD        # OLD: a directory holding an earlier
#                                     # build's stepbench(.gz) (scripts/gpu-run.sh build, copied aside)
#
# With the device tool, after `scripts/gpu-run.sh build` here:
#   run(command="scripts/gpu-run.sh; scripts/gpu-compare.sh bin/old", carry=["bin"])
#
# $OUT, when set, receives ab.log, kernels.csv (ncu's raw output) and
# kernels.md (the step's kernels summed by name). Environment:
# MEMFIT_GPU_BIN (default bin/gpu), MEMFIT_GPU_CONFIGS (gpt_fp32,gpt_bf16),
# MEMFIT_GPU_ROUNDS (2), NCU (ncu on PATH, else /usr/local/cuda/bin/ncu).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || {
  echo "usage: $0 OLD_BUILD_DIR" >&2
  exit 2
}
old=$1 new=${MEMFIT_GPU_BIN:-bin/gpu}
configs=${MEMFIT_GPU_CONFIGS:-gpt_fp32,gpt_bf16}
rounds=${MEMFIT_GPU_ROUNDS:-2}
out=${OUT:-$(mktemp -d)}
exe=$(mktemp -d)
for side in old new; do
  dir=${!side}
  if [ -f "$dir/stepbench.gz" ]; then gunzip -c "$dir/stepbench.gz" >"$exe/$side"; else cp "$dir/stepbench" "$exe/$side"; fi
  chmod +x "$exe/$side"
done
echo "old: $(head -c 12 "$old/commit" 2>/dev/null || echo "$old")  new: $(head -c 12 "$new/commit" 2>/dev/null || echo "$new")"
for r in $(seq "$rounds"); do
  for side in old new; do
    echo "== $side round $r"
    timeout 120 scripts/gpu-run.sh exec "$exe/$side" -device cuda -steps 20 -warmup 3 -configs "$configs" 2>&1 | grep '^{' || true
  done
done | tee "$out/ab.log"

ncu=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
timeout 180 scripts/gpu-run.sh exec "$ncu" --metrics gpu__time_duration.sum --csv --print-units base \
  "$exe/new" -device cuda -configs gpt_fp32 -steps 1 -warmup 1 >"$out/kernels.csv" 2>&1
# The timed step's kernels: those after the warm-up step's optimizer
# launch (k_adam…) up to the timed step's.
python3 - "$out/kernels.csv" <<'PY' | tee "$out/kernels.md"
import collections, csv, sys
rows = list(csv.DictReader(l for l in open(sys.argv[1], errors="replace") if l.startswith('"')))
names = [r["Kernel Name"] for r in rows]
ms = [float(r["Metric Value"].replace(",", "")) / 1e6 for r in rows]
adam = [i for i, n in enumerate(names) if n.startswith("k_adam")]
ends = [adam[j] for j in range(len(adam)) if j + 1 == len(adam) or adam[j + 1] != adam[j] + 1]
lo, hi = ends[-2] + 1, ends[-1] + 1
by = collections.defaultdict(lambda: [0, 0.0])
for n, t in zip(names[lo:hi], ms[lo:hi]):
    by[n[:60]][0] += 1
    by[n[:60]][1] += t
print("| kernel | launches | ms (ncu clocks) |\n|---|---|---|")
for n, (c, t) in sorted(by.items(), key=lambda kv: -kv[1][1]):
    print("| %s | %d | %.3f |" % (n, c, t))
print("| all | %d | %.3f |" % (hi - lo, sum(ms[lo:hi])))
PY
