#!/usr/bin/env bash
# space_warning.sh CNN: a run whose checkpoint folder has less free space than a checkpoint needs
# is warned at its start, before any step, with both figures (Checkpointer::check_room in
# train/checkpoint.h). The folder is a 64 KiB tmpfs; where mounting one is not allowed (not
# root, a container without the capability) the test is skipped (exit 77).
set -uo pipefail
exe=$1
dir=$(mktemp -d)
cleanup() { umount "$dir/tiny" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
mkdir "$dir/tiny"
if ! mount -t tmpfs -o size=64k tmpfs "$dir/tiny" 2>/dev/null; then
  echo "SKIPPED: cannot mount a tmpfs here"
  exit 77
fi
cd "$dir"
out=$("$exe" --smoke --device cpu --max-steps 1 --checkpoint "$dir/tiny/c.safetensors" 2>&1)
status=$?
printf '%s\n' "$out"
warning=$(printf '%s\n' "$out" | grep -n "warning: --checkpoint $dir/tiny/c.safetensors: its folder has [0-9]* bytes free, and a checkpoint of this run takes about [0-9]*" | cut -d: -f1)
first_epoch=$(printf '%s\n' "$out" | grep -n "^epoch 1" | head -n 1 | cut -d: -f1)
[ -n "$warning" ] || { echo "FAIL: no free-space warning"; exit 1; }
[ -n "$first_epoch" ] && [ "$warning" -lt "$first_epoch" ] || { echo "FAIL: the warning does not come before training"; exit 1; }
[ "$status" -ne 0 ] || { echo "FAIL: the save into a full folder did not fail"; exit 1; }
echo "warned before training; the save failed as warned"
