#!/usr/bin/env bash
# lab_smoke.sh PYTHON CHECKER PRECISION_LAB: runs the precision lab's smoke configuration (all ten
# configurations, a few steps each) and checks its outputs: every metrics file is valid JSON Lines
# (scripts/check_metrics.py), lab.json has the ten rows, the fp16 run without a loss scale
# measured backward underflow, and the backoff-scaled fp16 run measured less.
set -euo pipefail
python=$1 checker=$2 exe=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$exe" --smoke --out-dir "$dir/lab"
for f in "$dir"/lab/*.jsonl; do "$python" "$checker" "$f" --loss-key loss >/dev/null; done
"$python" - "$dir/lab/lab.json" <<'PY'
import json, sys
rows = {r["config"]: r for r in json.load(open(sys.argv[1], encoding="utf-8"))}
want = ["fp32", "fp16-noscale", "fp16-static", "fp16-backoff", "fp16-logmax", "fp16-gradient", "bf16",
        "bf16-pure-nearest", "bf16-pure-sr", "bf16-pure-kahan"]
missing = [c for c in want if c not in rows]
if missing:
    sys.exit(f"lab.json lacks {missing}")
if rows["fp32"]["underflow_rate"] is not None:
    sys.exit("fp32 rounded values to 16 bits in its backward pass")
none, backoff = rows["fp16-noscale"]["underflow_rate"], rows["fp16-backoff"]["underflow_rate"]
print(f"fp16 backward underflow: no scaling {none:.4%}, backoff {backoff:.4%}")
if not (none > 0 and backoff < none):
    sys.exit("expected measured underflow without loss scaling and less with backoff")
PY
