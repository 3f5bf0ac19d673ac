#!/usr/bin/env bash
# mixtape's training step against the same models in PyTorch on the CPU, side by side in one run.
#
#   bench/cpu_speed.sh                      # every model, 3 alternating rounds of 20 steps, 2 threads
#   bench/cpu_speed.sh --models cnn --rounds 5 --threads 1
#
# Installs PyTorch (Debian's python3-torch, a benchmark-only dependency) when it is missing,
# builds bench/cpu_train_step, then alternates mixtape and PyTorch for --rounds rounds (so both
# see the same machine), and prints for each model and precision the median ms/step of each and
# the ratios the README's Performance section quotes (each the median of the rounds' ratios):
#   mixtape / PyTorch at the same precision (fp32 and bf16; PyTorch's bf16 is CPU autocast),
#   each 16- and 8-bit policy / mixtape's own fp32, each pure policy / the mixed one of its dtype,
#   and the 8-bit policy (fp8: current scaling, E4M3 / E5M2 GEMM operands over bf16) / bf16.
# Check `uptime` first: the figures mean something only on a quiet machine. Results (JSON Lines,
# every round) go to build/bench/cpu_speed.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
models=cnn,char_lstm,dcgan
precisions=fp32,bf16,fp16,bf16-pure-sr,bf16-pure-kahan,fp8
rounds=3
threads=2
steps=20
warmup=3
while [ $# -gt 0 ]; do
  case "$1" in
    --models) models=$2; shift 2 ;;
    --precisions) precisions=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    *) echo "cpu_speed.sh: unknown argument '$1' (--models, --precisions, --rounds, --threads, --steps, --warmup)" >&2; exit 2 ;;
  esac
done

if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "cpu_speed.sh: installing python3-torch (Debian) for the PyTorch side"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get install -y --no-install-recommends python3-torch >/dev/null
fi
./scripts/install_deps.sh >/dev/null
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)" --target bench_cpu_train_step >/dev/null

out=build/bench/cpu_speed.jsonl
: >"$out"
# The model name alone may not tell the core (a virtual machine's "AMD EPYC"): family and model do
# (AMD family 25 model 17 is Zen 4, family 26 Zen 5).
cpu_field() { grep -m1 "^$1[[:space:]]*:" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'; }
echo "CPU: $(cpu_field 'model name') (family $(cpu_field 'cpu family'), model $(cpu_field model)), $(nproc) cores;" \
  "load: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  for m in ${models//,/ }; do
    ./build/bench/cpu_train_step --json --models "$m" --precisions "$precisions" --threads "$threads" \
      --steps "$steps" --warmup "$warmup" | sed "s/^{/{\"round\":$r,/" >>"$out"
    /usr/bin/python3 bench/torch_cpu_reference.py --models "$m" --precisions fp32,bf16 --threads "$threads" \
      --steps "$steps" --warmup "$warmup" | sed "s/^{/{\"round\": $r, /" >>"$out"
  done
  echo "round $r of $rounds done"
done

/usr/bin/python3 - "$out" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by_round = {}  # (impl, model, precision) -> {round: ms}
for r in rows:
    by_round.setdefault((r["impl"], r["model"], r["precision"]), {})[r["round"]] = r["ms_per_step"]
med = {k: statistics.median(v.values()) for k, v in by_round.items()}

# A ratio is taken round by round (the two figures of one round saw the same machine) and its
# median printed: the machine's speed drifts between rounds more than within one.
def ratio(a, b):
    ra, rb = by_round.get(a), by_round.get(b)
    if not ra or not rb:
        return None
    pairs = [ra[k] / rb[k] for k in ra if k in rb]
    return statistics.median(pairs) if pairs else None
models = sorted({k[1] for k in med}, key=["cnn", "char_lstm", "dcgan"].index)
threads = rows[0]["threads"]
print(f"\nmedian ms/step over {max(r['round'] for r in rows)} rounds, batch {rows[0]['batch']}, {threads} threads;"
      " ratios: the median of the rounds' ratios")
print(f"{'model':10} {'precision':16} {'mixtape':>9} {'PyTorch':>9} {'vs PyTorch':>11} {'vs own fp32':>12} {'vs mixed':>9}")
for m in models:
    for p in ["fp32", "bf16", "fp16", "bf16-pure-sr", "bf16-pure-kahan", "fp8"]:
        mt = med.get(("mixtape", m, p))
        if mt is None:
            continue
        pt = med.get(("pytorch", m, p))
        vs_torch = ratio(("mixtape", m, p), ("pytorch", m, p))
        vs_own = ratio(("mixtape", m, p), ("mixtape", m, "fp32")) if p != "fp32" else None
        mixed = "bf16" if p == "fp8" else p.split("-")[0]  # fp8 runs the bf16 policy underneath
        vs_mixed = ratio(("mixtape", m, p), ("mixtape", m, mixed)) if "pure" in p or p == "fp8" else None
        cell = lambda x: f"{x:.2f}x" if x else "-"
        print(f"{m:10} {p:16} {mt:9.2f} {f'{pt:.2f}' if pt else '-':>9} {cell(vs_torch):>11} "
              f"{cell(vs_own):>12} {cell(vs_mixed):>9}")
EOF
