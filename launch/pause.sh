#!/usr/bin/env bash
# Freezes (stop) or resumes (cont) every process whose command line names RUN_DIR: the lane's
# training, so that tests or benchmarks get a quiet machine. A frozen row loses nothing; it
# goes on from the same instruction when resumed.
#
# usage: launch/pause.sh RUN_DIR stop|cont
set -u
if [ $# -ne 2 ] || { [ "$2" != stop ] && [ "$2" != cont ]; }; then
  echo "usage: launch/pause.sh RUN_DIR stop|cont" >&2
  exit 2
fi
run_dir=$1
signal=$(echo "$2" | tr a-z A-Z)
for pid in $(pgrep -f -- "$run_dir"); do
  if [ "$pid" != $$ ]; then kill "-$signal" "$pid" 2>/dev/null; fi
done
echo "$(date -u +%FT%TZ) pause.sh $2" >> "$run_dir/lane.log"
