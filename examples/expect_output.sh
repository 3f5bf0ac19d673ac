#!/usr/bin/env bash
# expect_output.sh pass|fail [--has REGEX]... [--not REGEX]... [--mkdir DIR]... -- EXE [ARGS...]:
# runs EXE with ARGS in a fresh temporary folder (the working directory, so relative output paths
# vanish with it; --mkdir creates folders in it first) and checks how it ends:
#   pass  EXE exits 0
#   fail  EXE exits with an error status (not 0, and not killed by a signal: a crash is no error
#         message)
# and that its output (stdout and stderr together) matches every --has and none of the --not
# extended regular expressions. Used by the example tests that check flag handling: bad flags
# are refused with a message that names them, before any training starts.
set -uo pipefail
want=$1
shift
has=() nots=() dirs=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  case $1 in
    --has) has+=("$2") ;;
    --not) nots+=("$2") ;;
    --mkdir) dirs+=("$2") ;;
    *) echo "expect_output.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift 2
done
shift  # --
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
for d in ${dirs[@]+"${dirs[@]}"}; do mkdir -p -- "$d"; done

echo "== $*"
"$@" > "$dir/output.log" 2>&1
status=$?
cat "$dir/output.log"
echo "== exit status $status"

ok=1
case $want in
  pass) [ "$status" -eq 0 ] || { echo "FAIL: expected exit status 0"; ok=0; } ;;
  fail)
    if [ "$status" -eq 0 ]; then
      echo "FAIL: expected an error exit, got status 0"
      ok=0
    elif [ "$status" -gt 128 ]; then
      echo "FAIL: killed by signal $((status - 128)) instead of exiting with an error"
      ok=0
    fi
    ;;
  *) echo "expect_output.sh: first argument must be pass or fail, got '$want'" >&2; exit 2 ;;
esac
for re in ${has[@]+"${has[@]}"}; do
  grep -Eq -- "$re" "$dir/output.log" || { echo "FAIL: the output does not match '$re'"; ok=0; }
done
for re in ${nots[@]+"${nots[@]}"}; do
  if grep -Eq -- "$re" "$dir/output.log"; then
    echo "FAIL: the output matches '$re'"
    ok=0
  fi
done
[ "$ok" -eq 1 ] && echo "OK" && exit 0
exit 1
