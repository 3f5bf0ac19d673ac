#!/usr/bin/env bash
# lab_smoke.sh PYTHON CHECKER PRECISION_LAB DEVICE: runs the precision lab's smoke configuration
# (all ten configurations, a few steps each) on DEVICE and checks its outputs: every metrics file
# is valid JSON Lines (scripts/check_metrics.py), lab.json has the ten rows on DEVICE, the fp16
# run without a loss scale measured backward underflow, and the backoff-scaled fp16 run measured
# less. The underflow comes from the rounding census, which counts CPU roundings only, so on a
# CUDA device that check is left out (the rows say null: not measured). For a CUDA device the
# $MIXTAPE_CUDA_PROBE program runs first and its exit code 77 (no GPU) makes this a skip.
set -euo pipefail
python=$1 checker=$2 exe=$3 device=$4
if [ "$device" != cpu ]; then
  probe_status=0
  "${MIXTAPE_CUDA_PROBE:?set MIXTAPE_CUDA_PROBE to the cuda_probe program}" || probe_status=$?
  if [ "$probe_status" -ne 0 ]; then exit "$probe_status"; fi  # 77: skipped
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$exe" --smoke --device "$device" --out-dir "$dir/lab"
for f in "$dir"/lab/*.jsonl; do "$python" "$checker" "$f" --loss-key loss >/dev/null; done
"$python" - "$dir/lab/lab.json" "$device" <<'PY'
import json, sys
device = "cuda:0" if sys.argv[2] == "cuda" else sys.argv[2]
rows = {r["config"]: r for r in json.load(open(sys.argv[1], encoding="utf-8"))}
wrong = [c for c, r in rows.items() if r.get("device") != device]
if wrong:
    sys.exit(f"lab.json: rows {wrong} did not run on {device}")
want = ["fp32", "fp16-noscale", "fp16-static", "fp16-backoff", "fp16-logmax", "fp16-gradient", "bf16",
        "bf16-pure-nearest", "bf16-pure-sr", "bf16-pure-kahan"]
missing = [c for c in want if c not in rows]
if missing:
    sys.exit(f"lab.json lacks {missing}")
if rows["fp32"]["underflow_rate"] is not None:
    sys.exit("fp32 rounded values to 16 bits in its backward pass")
none, backoff = rows["fp16-noscale"]["underflow_rate"], rows["fp16-backoff"]["underflow_rate"]
if device != "cpu":
    print(f"fp16 backward underflow on {device}: no scaling {none}, backoff {backoff} "
          "(not checked: the rounding census counts CPU roundings)")
    sys.exit(0)
print(f"fp16 backward underflow: no scaling {none:.4%}, backoff {backoff:.4%}")
if not (none > 0 and backoff < none):
    sys.exit("expected measured underflow without loss scaling and less with backoff")
PY
