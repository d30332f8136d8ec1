#!/usr/bin/env bash
# Times memfit and the PyTorch CPU peer (../shared/peers/torch_bench.py) on
# the same configurations, interleaved, and prints memfit/PyTorch step-time
# ratios (below 1: memfit is faster) and the activation memory of each.
#
# Needs Debian's python3-torch (run with /usr/bin/python3) and, for the real
# data, dataset-fashion-mnist and fortunes:
#   apt-get install python3-torch dataset-fashion-mnist fortunes fortune-mod
# Usage: scripts/bench-vs-torch.sh [configs] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
configs=${1:-mlp_fp32,gpt_fp32,gpt_bf16}
rounds=${2:-3}
peers=${PEERS:-../shared/peers}
out=$(mktemp -d)
go build -o "$out/stepbench" ./cmd/stepbench
for r in $(seq "$rounds"); do
  "$out/stepbench" -configs "$configs" -steps 10 >"$out/memfit.$r.jsonl"
  # The environment pins OpenBLAS to its Haswell kernel; the peer figures
  # use the AVX-512 one, as the issue asks.
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 "$peers/torch_bench.py" \
    --configs "$configs" --quick --json "$out/torch.$r.json" >/dev/null
done
/usr/bin/python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys, glob
out, rounds = sys.argv[1], int(sys.argv[2])
mem = {}
for f in glob.glob(out + "/memfit.*.jsonl"):
    for line in open(f):
        r = json.loads(line)
        mem.setdefault(r["config"], []).append(r)
tor = {}
for f in glob.glob(out + "/torch.*.json"):
    for r in json.load(open(f)):
        if "step_s_median" in r:
            tor.setdefault(r["config"], []).append(r)
print(f"{'config':16} {'memfit ms':>10} {'torch ms':>10} {'ratio':>6} {'memfit act MiB':>15} {'torch saved MiB':>16}")
for name, rs in sorted(mem.items()):
    m = statistics.median(r["median_ms"] for r in rs)
    act = rs[0]["peak_activation_bytes"] / 2**20
    t = statistics.median(1000 * r["step_s_median"] for r in tor[name]) if name in tor else float("nan")
    ts = tor[name][0]["saved_activation_bytes"] / 2**20 if name in tor else float("nan")
    print(f"{name:16} {m:10.1f} {t:10.1f} {m/t:6.2f} {act:15.1f} {ts:16.1f}")
PY
