#!/usr/bin/env bash
# Resuming is bit-exact (Note [Resumable runs] in train/checkpoint.h):
#   resume_check.sh PYTHON EXE TOTAL K ARGS...
# trains EXE ARGS for TOTAL steps in one run, and again as K steps, a save, and a resumed run to
# TOTAL (saving every 3 steps on the way), then compares every tensor and metadata entry of the
# two final checkpoints (scripts/safetensors_np.py compare: names, dtypes, shapes, SHA-256 of the
# bytes). Finally a resume under another precision policy must be refused, naming the difference.
set -euo pipefail
python=$1 exe=$2 total=$3 k=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
compare="$here/../scripts/safetensors_np.py"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"

run() {  # run LOG ARGS...: the program's output goes to LOG, shown when it fails
  local log=$1
  shift
  if ! "$exe" "$@" --device cpu --out-dir "$dir" >"$log" 2>&1; then
    echo "resume_check: FAILED: $exe $* --device cpu"
    cat "$log"
    exit 1
  fi
}

run whole.log "$@" --max-steps "$total" --checkpoint whole.safetensors
run part1.log "$@" --max-steps "$k" --checkpoint parts.safetensors
run part2.log "$@" --max-steps "$total" --checkpoint parts.safetensors --resume --checkpoint-every 3
grep -q "resumed from parts.safetensors at step $k" part2.log || {
  echo "resume_check: the second run did not resume at step $k"
  cat part2.log
  exit 1
}
"$python" "$compare" compare whole.safetensors parts.safetensors
echo "resume_check: $total steps in one run == $k steps + resume to $total, bit for bit ($*)"

# The same checkpoint under another policy: refused before any step, naming what differs.
if "$exe" "$@" --precision fp16-pure --max-steps "$total" --checkpoint parts.safetensors --resume --device cpu \
  --out-dir "$dir" >other.log 2>&1; then
  echo "resume_check: a checkpoint of another precision policy was resumed"
  exit 1
fi
grep -q "belongs to another run" other.log && grep -q "precision: the checkpoint has" other.log || {
  echo "resume_check: the refusal does not say why"
  cat other.log
  exit 1
}
echo "resume_check: a checkpoint of another precision policy is refused"
