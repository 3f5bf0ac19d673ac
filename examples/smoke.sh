#!/usr/bin/env bash
# smoke.sh PYTHON CHECKER EXAMPLE [ARGS...]: runs EXAMPLE's smoke configuration (its --smoke flag
# picks a few steps on real data) under fp32, then under fp16 (backoff loss scale, telemetry
# every 4 steps) and bf16-pure (stochastic rounding) with ARGS added (--max-steps N keeps those
# two short), each with a metrics file, in a temporary folder that is also the working directory
# (every example writes its outputs to "." by default). Each run must write valid JSON Lines
# whose training loss falls (scripts/check_metrics.py) and a summary event that reports the
# loss scaler's skipped steps and final scale; the fp16 run must also write telemetry.
set -euo pipefail
python=$1 checker=$2 exe=$3
shift 3
extra=("$@")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"

# The last summary event has every key in $2 (comma-separated), possibly behind a network prefix
# ("g_final_scale"); with a third argument, some line is an event of that kind.
check_summary() {
  "$python" - "$@" <<'PY'
import json, sys
path, keys = sys.argv[1], sys.argv[2].split(",")
events = [json.loads(line) for line in open(path, encoding="utf-8")]
summaries = [e for e in events if e["event"] == "summary"]
if not summaries:
    sys.exit(f"{path}: no summary event")
s = summaries[-1]
for k in keys:
    found = [n for n in s if n == k or n.endswith("_" + k)]
    if not found:
        sys.exit(f"{path}: the summary has no '{k}': {sorted(s)}")
    print(f"{path}: " + ", ".join(f"{n} {s[n]}" for n in found))
if len(sys.argv) > 3 and not any(e["event"] == sys.argv[3] for e in events):
    sys.exit(f"{path}: no '{sys.argv[3]}' event")
PY
}

run() {  # run NAME ARGS...: one smoke run with metrics NAME.jsonl, then its checks
  local name=$1
  shift
  echo "== $(basename "$exe") --smoke $*"
  local t0=$SECONDS
  "$exe" --smoke --metrics "$dir/$name.jsonl" "$@"
  "$python" "$checker" "$dir/$name.jsonl" --loss-falls
  echo "== $name: $((SECONDS - t0)) s"
}

run fp32
check_summary fp32.jsonl precision
run fp16 --precision fp16 --loss-scale backoff --telemetry-every 4 ${extra[@]+"${extra[@]}"}
check_summary fp16.jsonl skipped_steps,final_scale rounding
run bf16_pure --precision bf16-pure --update-rounding stochastic ${extra[@]+"${extra[@]}"}
check_summary bf16_pure.jsonl skipped_steps,final_scale,update_rounding
