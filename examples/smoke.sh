#!/usr/bin/env bash
# smoke.sh PYTHON CHECKER EXAMPLE DEVICE [ARGS...] [-- EVERY...]: runs EXAMPLE's smoke
# configuration (its --smoke flag picks a few steps on real data) on DEVICE (cpu, cuda, cuda:N)
# under fp32, then under fp16 (backoff loss scale, telemetry every 4 steps) and bf16-pure
# (stochastic rounding) with ARGS added (--max-steps N keeps those two short), EVERY added to all
# three runs (a model variant: char_lstm --cell gru), each with a metrics file, in a temporary
# folder that is also the working directory (every example writes its outputs to "." by default).
# Each run must write valid JSON Lines whose training loss falls (scripts/check_metrics.py) and a
# summary event that reports the device, the loss scaler's skipped steps and final scale; the
# fp16 run must also write telemetry.
# For a CUDA device the program named by $MIXTAPE_CUDA_PROBE (examples/cuda_probe.cpp) runs first:
# without a GPU it prints "SKIPPED: no CUDA device" and this script exits 77, which ctest reports
# as skipped.
set -euo pipefail
python=$1 checker=$2 exe=$3 device=$4
shift 4
extra=() every=()
while [ $# -gt 0 ]; do
  if [ "$1" = -- ]; then
    shift
    every=("$@")
    break
  fi
  extra+=("$1")
  shift
done
if [ "$device" != cpu ]; then
  probe_status=0
  "${MIXTAPE_CUDA_PROBE:?set MIXTAPE_CUDA_PROBE to the cuda_probe program}" || probe_status=$?
  if [ "$probe_status" -ne 0 ]; then exit "$probe_status"; fi  # 77: skipped
fi
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

# The summary names the device the run asked for ("cuda" is cuda:0).
check_device() {
  "$python" - "$1" "$device" <<'PY'
import json, sys
path, want = sys.argv[1], sys.argv[2]
want = "cuda:0" if want == "cuda" else want
s = [e for e in map(json.loads, open(path, encoding="utf-8")) if e["event"] == "summary"][-1]
if s.get("device") != want:
    sys.exit(f"{path}: the summary says device {s.get('device')!r}, expected {want!r}")
PY
}

run() {  # run NAME ARGS...: one smoke run with metrics NAME.jsonl, then its checks
  local name=$1
  shift
  echo "== $(basename "$exe") --smoke --device $device ${every[*]+"${every[*]}"} $*"
  local t0=$SECONDS
  "$exe" --smoke --device "$device" --metrics "$dir/$name.jsonl" ${every[@]+"${every[@]}"} "$@"
  "$python" "$checker" "$dir/$name.jsonl" --loss-falls
  check_device "$dir/$name.jsonl"
  echo "== $name: $((SECONDS - t0)) s"
}

run fp32
check_summary fp32.jsonl precision
run fp16 --precision fp16 --loss-scale backoff --telemetry-every 4 ${extra[@]+"${extra[@]}"}
check_summary fp16.jsonl skipped_steps,final_scale rounding
# The runtime counters (Note [Runtime counters] in cuda/runtime.h; 0 on the CPU); mlp_demo has none.
if [ "$(basename "$exe")" != mlp_demo ]; then
  check_summary fp16.jsonl launches_per_step,host_syncs_per_step,host_syncs_per_logging_step,device_allocs_after_warmup
fi
run bf16_pure --precision bf16-pure --update-rounding stochastic ${extra[@]+"${extra[@]}"}
check_summary bf16_pure.jsonl skipped_steps,final_scale,update_rounding
