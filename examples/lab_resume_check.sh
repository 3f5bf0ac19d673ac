#!/usr/bin/env bash
# lab_resume_check.sh PYTHON PRECISION_LAB: precision_lab's runs resume (--resume, --checkpoint-every).
# A suite stopped after 3 steps per run and resumed to 6 gives the rows (lab.json, all but the wall
# time) and the run checkpoints of a suite that ran 6 steps straight; resuming the finished suite
# once more re-evaluates its runs and changes no row.
set -euo pipefail
python=$1 exe=$2
compare="$(cd "$(dirname "$0")" && pwd)/../scripts/safetensors_np.py"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
args=(--smoke --device cpu --only fp32,fp16-backoff,bf16-pure-sr --no-plots)
"$exe" "${args[@]}" --max-steps 6 --checkpoint-every 100 --out-dir "$dir/whole" >"$dir/whole.log" 2>&1
"$exe" "${args[@]}" --max-steps 3 --checkpoint-every 2 --out-dir "$dir/parts" >"$dir/part1.log" 2>&1
"$exe" "${args[@]}" --max-steps 6 --resume --out-dir "$dir/parts" >"$dir/part2.log" 2>&1
grep -c "resumed from" "$dir/part2.log" | grep -qx 3 || { echo "lab_resume_check: the runs did not resume"; cat "$dir/part2.log"; exit 1; }
cp "$dir/parts/lab.json" "$dir/parts.json"
"$exe" "${args[@]}" --max-steps 6 --resume --out-dir "$dir/parts" >"$dir/part3.log" 2>&1
for run in fp32 fp16-backoff bf16-pure-sr; do
  "$python" "$compare" compare "$dir/whole/$run.safetensors" "$dir/parts/$run.safetensors"
done
"$python" - "$dir/whole/lab.json" "$dir/parts.json" "$dir/parts/lab.json" <<'PY'
import json, sys
def rows(path):
    out = json.load(open(path, encoding="utf-8"))
    for r in out:
        r.pop("wall_s", None)
    return out
whole, parts, again = (rows(p) for p in sys.argv[1:])
if parts != whole:
    sys.exit(f"lab_resume_check: resumed rows differ\n{json.dumps(whole, indent=1)}\n{json.dumps(parts, indent=1)}")
if again != whole:
    sys.exit("lab_resume_check: resuming a finished suite changed its rows")
print(f"lab_resume_check: {len(whole)} runs of 3 + 3 resumed steps equal 6 straight ones (rows and checkpoints)")
PY
