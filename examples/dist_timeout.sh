#!/usr/bin/env bash
# dist_timeout.sh MPIEXEC CNN [RANK]: under `mpirun -np 2`, rank RANK (default 1) is stopped with
# SIGSTOP in the middle of training, as a swapped-out or wedged process would be; the other rank
# must leave its collective after --dist-timeout seconds with an error naming the collective, the
# step and the stopped rank, and the job must end non-zero within the timeout plus a few seconds
# (Note [Collectives that cannot hang] in dist/communicator.h).
set -uo pipefail
mpiexec=$1
exe=$2
stopped_rank=${3:-1}
timeout=4
slack=8  # the ranks' 2-second round of questions, MPI_Abort, and a loaded machine
dir=$(mktemp -d)
job=
# The processes of this test: those whose command line holds the marker (read from /proc, so that
# nothing beyond bash and coreutils is needed).
job_pids() {
  local c
  for c in /proc/[0-9]*/cmdline; do
    tr '\0' ' ' <"$c" 2>/dev/null | grep -q -- "$dir/marker" && basename "$(dirname "$c")"
  done
}
cleanup() {
  [ -n "$job" ] && kill -KILL "$job" 2>/dev/null
  for p in $(job_pids); do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
cd "$dir"

# Rank 0 prints a line per epoch (32 steps with --smoke), so the test sees training under way. The marker in
# --out-dir names this test's processes for the cleanup.
"$mpiexec" --oversubscribe -np 2 "$exe" --smoke --device cpu --threads 1 --max-steps 100000 --epochs 1000 \
  --dist-timeout $timeout --out-dir "$dir/marker" >out.txt 2>err.txt &
job=$!
for _ in $(seq 600); do  # up to 60 s for MPI to start and the first steps to be logged
  [ "$(grep -c " loss " out.txt 2>/dev/null)" -ge 3 ] && break
  sleep 0.1
done
[ "$(grep -c " loss " out.txt)" -ge 3 ] || { cat out.txt err.txt; echo "FAIL: training did not start"; exit 1; }

# The rank's process: a process of this job whose environment says OMPI_COMM_WORLD_RANK=<rank>.
pid=
for p in $(job_pids); do
  if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$stopped_rank"; then pid=$p; fi
done
[ -n "$pid" ] || { echo "FAIL: no process of rank $stopped_rank found"; exit 1; }
kill -STOP "$pid"
t0=$(date +%s.%N)
echo "stopped rank $stopped_rank (pid $pid)"

ended=0
for _ in $(seq $(((timeout + slack) * 10))); do
  if ! kill -0 "$job" 2>/dev/null; then ended=1; break; fi
  sleep 0.1
done
t1=$(date +%s.%N)
status=0
if [ $ended -eq 1 ]; then wait "$job"; status=$?; fi
cat err.txt
took=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
echo "the job ended $took s after the stop, status $status"
[ $ended -eq 1 ] || { echo "FAIL: the job still runs $((timeout + slack)) s after rank $stopped_rank was stopped"; exit 1; }
[ "$status" -ne 0 ] || { echo "FAIL: the job exited 0"; exit 1; }
live=$((1 - stopped_rank))
grep -q "timed out after $timeout s on rank $live of 2: rank(s) $stopped_rank did not arrive" err.txt ||
  { echo "FAIL: no error from rank $live naming rank $stopped_rank"; exit 1; }
grep -q "collective [0-9]* of this run, at step [0-9]*" err.txt || { echo "FAIL: the error names no collective and step"; exit 1; }
echo "rank $live named the collective, the step and rank $stopped_rank; the job ended in $took s"
