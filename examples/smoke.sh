#!/usr/bin/env bash
# smoke.sh PYTHON CHECKER EXAMPLE: runs EXAMPLE's smoke configuration (its --smoke flag picks
# a few steps on real data) with a metrics file, then checks the file and that the loss fell.
set -euo pipefail
python=$1 checker=$2 exe=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$exe" --smoke --metrics "$dir/metrics.jsonl" --out-dir "$dir"
"$python" "$checker" "$dir/metrics.jsonl" --loss-falls
