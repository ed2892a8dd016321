#!/usr/bin/env bash
# Freezes (stop) or resumes (cont) every process whose command line names RUN_DIR: the lane's
# training, so that tests or benchmarks get a quiet machine. A frozen row loses nothing; it
# goes on from the same instruction when resumed. The processes that called this script are
# left alone, even when their command lines name RUN_DIR too.
#
# usage: launch/pause.sh RUN_DIR stop|cont
set -u
if [ $# -ne 2 ] || { [ "$2" != stop ] && [ "$2" != cont ]; }; then
  echo "usage: launch/pause.sh RUN_DIR stop|cont" >&2
  exit 2
fi
run_dir=$1
signal=$(echo "$2" | tr a-z A-Z)
callers=" $$ "
pid=$$
while [ "$pid" -gt 1 ]; do
  pid=$(ps -o ppid= -p "$pid" | tr -d ' ')
  [ -n "$pid" ] || break
  callers="$callers$pid "
done
for pid in $(pgrep -f -- "$run_dir"); do
  case "$callers" in
    *" $pid "*) ;;
    *) kill "-$signal" "$pid" 2>/dev/null ;;
  esac
done
echo "$(date -u +%FT%TZ) pause.sh $2" >> "$run_dir/lane.log"
