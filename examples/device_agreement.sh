#!/usr/bin/env bash
# device_agreement.sh PYTHON EXAMPLE DEVICE TOLERANCE [ARGS...]: trains EXAMPLE's smoke
# configuration (--smoke ARGS) once on the CPU and once on DEVICE from the same seed, and checks
# that the two runs agree step by step: the same logged steps, the same skipped steps, and every
# loss-like number of each step event (loss, d_loss, g_loss, ...) within TOLERANCE relative to
# the CPU's. Elementwise ops and casts are bit-identical across devices and sums differ only in
# their order (docs/cuda.md), so a larger gap means a kernel bug, not noise.
# For a CUDA device the program named by $MIXTAPE_CUDA_PROBE runs first and a missing GPU exits
# 77 (skipped), as in smoke.sh.
set -euo pipefail
python=$1 exe=$2 device=$3 tolerance=$4
shift 4
probe_status=0
"${MIXTAPE_CUDA_PROBE:?set MIXTAPE_CUDA_PROBE to the cuda_probe program}" >/dev/null || probe_status=$?
if [ "$probe_status" -ne 0 ]; then exit "$probe_status"; fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
for d in cpu "$device"; do
  echo "== $(basename "$exe") --smoke --device $d $*"
  mkdir -p "run_$d"
  (cd "run_$d" && "$exe" --smoke --device "$d" --metrics "$dir/$d.jsonl" "$@" > log.txt 2>&1) ||
    { tail -n 20 "run_$d/log.txt"; exit 1; }
  tail -n 2 "run_$d/log.txt"
done
"$python" - "$dir/cpu.jsonl" "$dir/$device.jsonl" "$tolerance" <<'PY'
import json, sys
def steps(path):
    return [e for e in map(json.loads, open(path, encoding="utf-8")) if e.get("event") == "step"]
cpu, dev, tol = steps(sys.argv[1]), steps(sys.argv[2]), float(sys.argv[3])
if not cpu or len(cpu) != len(dev):
    sys.exit(f"step events: {len(cpu)} on the CPU, {len(dev)} on the device")
worst = (0.0, "")
for a, b in zip(cpu, dev):
    if a.get("step") != b.get("step"):
        sys.exit(f"logged steps differ: {a.get('step')} vs {b.get('step')}")
    for k in sorted(a):
        if k == "skipped" or k.endswith("_skipped"):
            if a[k] != b.get(k):
                sys.exit(f"step {a['step']}: {k} is {a[k]} on the CPU, {b.get(k)} on the device")
        elif "loss" in k and isinstance(a[k], (int, float)):
            rel = abs(a[k] - b[k]) / max(abs(a[k]), 1e-6)
            if rel > worst[0]:
                worst = (rel, f"step {a['step']} {k}: cpu {a[k]:.6g}, device {b[k]:.6g}")
            if rel > tol:
                sys.exit(f"step {a['step']}: {k} is {a[k]:.6g} on the CPU and {b[k]:.6g} on the device "
                         f"(relative gap {rel:.3g} > {tol})")
print(f"{len(cpu)} step events agree; largest relative loss gap {worst[0]:.3g} ({worst[1] or 'none'})")
PY
