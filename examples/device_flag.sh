#!/usr/bin/env bash
# device_flag.sh PROBE EXAMPLE: the --device flag's errors, on any machine. A malformed device is
# refused by the flag parser; a CUDA device that cannot be used (built without CUDA, no GPU
# visible, or an index past the last GPU) is an error message naming the reason and a nonzero
# exit, not a crash; --device cpu always works.
set -uo pipefail
probe=$1 exe=$2
fail() { echo "device_flag: $*" >&2; exit 1; }

out=$("$exe" --device tpu --steps 2 2>&1) && fail "--device tpu was accepted"
grep -q "bad device 'tpu'" <<<"$out" || fail "--device tpu: unexpected message: $out"

"$exe" --device cpu --smoke >/dev/null || fail "--device cpu failed"

"$probe" >/dev/null
if [ $? -eq 77 ]; then  # no usable GPU: asking for one must fail with the reason
  out=$("$exe" --device cuda --steps 2 2>&1)
  rc=$?
  [ $rc -ne 0 ] && [ $rc -lt 128 ] || fail "--device cuda without a GPU exited with $rc (want an error exit, not success or a signal)"
  grep -q -E "built without CUDA|no CUDA device is visible" <<<"$out" || fail "--device cuda: unexpected message: $out"
  echo "--device cuda without a GPU: $(grep -o -E 'built without CUDA|no CUDA device is visible' <<<"$out" | head -n 1) (exit $rc)"
else
  out=$("$exe" --device cuda:99 --steps 2 2>&1) && fail "--device cuda:99 was accepted"
  grep -q "does not exist" <<<"$out" || fail "--device cuda:99: unexpected message: $out"
fi
echo "device_flag: ok"
