#!/usr/bin/env bash
# fuzz.sh: the libFuzzer harnesses of fuzz/ (docs/fuzzing.md) over the file readers, in the asan
# preset's build tree (build-asan/: clang, AddressSanitizer + UBSan, MIXTAPE_FUZZ=ON).
#
#   1. build    configures build-asan/ when it has no cache yet, then builds the harnesses only
#   2. replay   each harness runs every file of fuzz/corpus/<harness>/ and fuzz/regressions/<harness>/
#               once: the regression test; any finding fails
#   3. fuzz     each harness for SECONDS (default 30) from a fresh copy of its corpus and regressions
#               in a temporary folder, with its dictionary (fuzz/<harness>.dict); the repository is
#               not modified
#
# Exits nonzero on any finding (crash, sanitizer report, hang, huge allocation, failed check) and
# prints where the input was saved (build-asan/fuzz/findings/<harness>/), with the command that
# replays it. Once the bug is fixed, the input goes to fuzz/regressions/<harness>/.
#
#   scripts/fuzz.sh                        # replay, then 30 s per harness
#   scripts/fuzz.sh 300                    # 5 minutes per harness (or FUZZ_SECONDS=300)
#   scripts/fuzz.sh 0                      # replay only
#   scripts/fuzz.sh 60 safetensors image   # some harnesses
#   FUZZ_BUILD=dir scripts/fuzz.sh         # another build tree configured with MIXTAPE_FUZZ=ON
#   FUZZ_SEED=0 scripts/fuzz.sh 1800 image # a random seed, for a long campaign
#   FUZZ_SEED=0 FUZZ_CPU=1 FUZZ_CORPUS=dir scripts/fuzz.sh 3600 text
#                                          # a campaign of one CPU-hour (docs/fuzzing.md): SECONDS
#                                          # counts the fuzzer's CPU time, not the clock, so that a
#                                          # campaign run at low priority beside other work still
#                                          # gets its hour; the corpus grows in dir/text/ and a
#                                          # later campaign continues from it
#
# The fuzzing step uses the seed FUZZ_SEED (default 1): a tree then tries the same inputs in the
# same order on every run (a faster machine gets further along them), so a test run cannot fail
# by chance on a tree that passed. New ground is for long campaigns with FUZZ_SEED=0 (random).
set -uo pipefail
cd "$(dirname "$0")/.."

all_harnesses=(safetensors idx image text checkpoint)
# Longest input each harness generates while fuzzing: room for deep nesting in a safetensors
# header (the nesting regression is 100 KB); images and IDX files big enough for several chunks.
declare -A max_len=([safetensors]=131072 [idx]=65536 [image]=65536 [text]=16384 [checkpoint]=65536)

seconds=${FUZZ_SECONDS:-30}
seed=${FUZZ_SEED:-1}
if [ $# -gt 0 ] && [[ $1 =~ ^[0-9]+$ ]]; then
  seconds=$1
  shift
fi
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=("${all_harnesses[@]}")
for h in "${harnesses[@]}"; do
  [ -n "${max_len[$h]:-}" ] || { echo "fuzz: unknown harness '$h' (one of: ${all_harnesses[*]})" >&2; exit 2; }
done

# ---- 1. build ----------------------------------------------------------------------------------
build=${FUZZ_BUILD:-build-asan}
if [ -z "${FUZZ_BUILD:-}" ] && [ ! -f "$build/CMakeCache.txt" ]; then
  cmake --preset asan >/dev/null || { echo "fuzz: FAILED to configure the asan preset"; exit 1; }
fi
targets=()
for h in "${harnesses[@]}"; do targets+=("fuzz_$h"); done
t0=$SECONDS
if ! cmake --build "$build" -j "${FUZZ_JOBS:-2}" --target "${targets[@]}" >"$build/fuzz-build.log" 2>&1; then
  tail -n 30 "$build/fuzz-build.log"
  echo "fuzz: FAILED to build the harnesses (log: $build/fuzz-build.log)"
  exit 1
fi
echo "fuzz: harnesses built in $((SECONDS - t0)) s ($build/fuzz)"

work=$(mktemp -d "${TMPDIR:-/tmp}/mixtape-fuzz.XXXXXX")
mkdir -p "$work/tmp"
export TMPDIR=$work/tmp  # the harnesses' scratch files
export OMP_NUM_THREADS=1  # one thread per harness: its CPU time is the time it fuzzed
findings=$build/fuzz/findings
failed=0

# report HARNESS LOG WHAT: prints a finding, the saved input and how to replay it.
report() {
  local h=$1 log=$2 what=$3
  failed=1
  echo "fuzz: $h: FINDING during $what:"
  grep -E '^(==[0-9]+==ERROR|SUMMARY|==== mixtape fuzz finding)|runtime error|ALARM|out-of-memory|deadly signal' "$log" \
    | head -n 6 | sed 's/^/    /'
  local saved
  saved=$(grep -o 'Test unit written to .*' "$log" | tail -n 1 | sed 's/^Test unit written to //')
  [ -n "$saved" ] || saved=$(grep -o '^Running: .*' "$log" | tail -n 1 | sed 's/^Running: //')
  echo "    input: ${saved:-unknown (see the log)}"
  echo "    replay: $build/fuzz/fuzz_$h ${saved:-<input>}"
  echo "    log: $log"
}

# fuzz_for_cpu_seconds N EXE ARGS...: runs the fuzzer until its CPU time (user + system) reaches N
# seconds, then interrupts it (libFuzzer then prints its final statistics). Its status is 0 when
# this function interrupted it, nonzero on a finding or when something else stopped it; the CPU
# seconds it used are left in $cpu_used. The caller sends its output to $log.
fuzz_for_cpu_seconds() {
  local limit=$1 ticks pid used=0 stopped_here=0
  shift
  ticks=$(getconf CLK_TCK)
  "$@" -max_total_time=$((limit * 1000)) &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 5
    # /proc/PID/stat fields 14 and 15: user and system time in clock ticks (after the ") " of the name)
    used=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | awk -v t="$ticks" '{print int(($12 + $13) / t)}' || echo "$used")
    if [ -n "$used" ] && [ "$used" -ge "$limit" ]; then
      echo "fuzz: $used CPU-seconds used; interrupting"
      stopped_here=1
      kill -INT "$pid"
      break
    fi
  done
  wait "$pid"
  local status=$?
  cpu_used=$used
  # libFuzzer exits with 72 when interrupted (clang 14's has no -interrupted_exit_code)
  [ "$status" -eq 72 ] && [ $stopped_here -eq 1 ] && status=0
  return $status
}

for h in "${harnesses[@]}"; do
  exe=$build/fuzz/fuzz_$h
  mkdir -p "$findings/$h"
  # -close_fd_mask=1: the programs' own prints (fuzz_checkpoint's "could not be verified") stay out of the logs
  common=(-timeout=10 -rss_limit_mb=2048 -close_fd_mask=1 "-artifact_prefix=$findings/$h/")

  # ---- 2. replay the corpus and the regressions ------------------------------------------------
  mapfile -t inputs < <(find "fuzz/corpus/$h" "fuzz/regressions/$h" -type f ! -name '.*' 2>/dev/null | sort)
  log=$findings/$h/replay.log
  if "$exe" "${common[@]}" "${inputs[@]}" >"$log" 2>&1; then
    echo "fuzz: $h: replayed ${#inputs[@]} inputs (corpus and regressions), no finding"
  else
    report "$h" "$log" "the replay"
    continue
  fi

  # ---- 3. fuzz from a fresh copy of the corpus ---------------------------------------------------
  [ "$seconds" -gt 0 ] || continue
  corpus=${FUZZ_CORPUS:-$work/corpus}/$h
  mkdir -p "$corpus"
  cp "${inputs[@]}" "$corpus/"
  log=$findings/$h/fuzz.log
  flags=("${common[@]}" -seed="$seed" -max_len="${max_len[$h]}" -dict="fuzz/$h.dict" -print_final_stats=1)
  if [ "${FUZZ_CPU:-0}" = 1 ]; then
    fuzz_for_cpu_seconds "$seconds" "$exe" "${flags[@]}" "$corpus" >"$log" 2>&1
  else
    "$exe" "${flags[@]}" -max_total_time="$seconds" "$corpus" >"$log" 2>&1
  fi
  if [ $? -eq 0 ]; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
    cov=$(grep -oE '(cov|ft): [0-9]+' "$log" | tail -n 2 | tr '\n' ' ')
    echo "fuzz: $h: fuzzed $([ "${FUZZ_CPU:-0}" = 1 ] && echo "${cpu_used:-?} CPU-" || echo "$seconds ")s (seed $seed), ${runs:-?} inputs," \
      "${cov}corpus $(find "$corpus" -type f | wc -l) files, no finding"
  else
    report "$h" "$log" "fuzzing"
  fi
done

rm -rf "$work"
if [ $failed -eq 0 ]; then
  echo "fuzz: PASSED (${harnesses[*]}: replay$([ "$seconds" -gt 0 ] && echo " + ${seconds} s of fuzzing each"))"
else
  echo "fuzz: FAILED (findings above; inputs under $findings/)"
fi
exit $failed
