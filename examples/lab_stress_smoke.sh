#!/usr/bin/env bash
# lab_stress_smoke.sh PYTHON CHECKER PRECISION_LAB: runs the precision lab's stress suite for a few
# steps per run (two seeds, four configurations) and checks its outputs: every metrics file is
# valid JSON Lines, lab.json has a row per regime, configuration and seed, the nonuniform
# regime's rows report the decoder's test MSE, lab.md has a table per regime with mean ± sd, and
# the gradient-scaling runs wrote per-node "scales" events.
set -euo pipefail
python=$1 checker=$2 exe=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$exe" --suite stress --smoke --seeds 2 --max-steps 6 --only fp32,fp16-backoff,fp16-gradient,bf16-pure-sr \
  --out-dir "$dir/lab"
for f in "$dir"/lab/*/*.jsonl; do "$python" "$checker" "$f" --loss-key loss >/dev/null; done
"$python" - "$dir/lab" <<'PY'
import json, os, sys
lab = sys.argv[1]
rows = json.load(open(os.path.join(lab, "lab.json"), encoding="utf-8"))
want = {("underflow", c) for c in ("fp32", "fp16-backoff", "fp16-gradient")}
want |= {("nonuniform", c) for c in ("fp32", "fp16-backoff", "fp16-gradient")}
want |= {("stall", c) for c in ("fp32", "bf16-pure-sr")}
got = {}
for r in rows:
    got.setdefault((r.get("regime"), r["config"]), set()).add(r["seed"])
missing = [k for k in sorted(want) if len(got.get(k, ())) != 2]
if missing or len(got) != len(want):
    sys.exit(f"lab.json: expected two seeds of {sorted(want)}, got {sorted(got)}")
if any(r.get("regime") == "nonuniform" and not isinstance(r.get("test_aux_mse"), float) for r in rows):
    sys.exit("lab.json: a nonuniform row lacks the decoder's test MSE")
md = open(os.path.join(lab, "lab.md"), encoding="utf-8").read()
for regime in ("underflow", "nonuniform", "stall"):
    if f"### {regime}" not in md:
        sys.exit(f"lab.md lacks the {regime} table")
if "±" not in md:
    sys.exit("lab.md reports no mean ± sd")
events = [json.loads(l) for l in open(os.path.join(lab, "nonuniform", "fp16-gradient-seed0.jsonl"), encoding="utf-8")]
scales = [e for e in events if e.get("event") == "scales"]
if not scales or not any(k.endswith(" dW") for k in scales[0]["log2_scale"]):
    sys.exit("fp16-gradient wrote no per-node scales with weight-gradient entries")
print(f"stress suite smoke: {len(rows)} runs, {len(scales)} scales events in nonuniform/fp16-gradient-seed0")
PY
