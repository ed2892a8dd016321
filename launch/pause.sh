#!/usr/bin/env bash
# Freezes (stop) or resumes (cont) every process whose command line names RUN_DIR: the lane's
# training, so that tests or benchmarks get a quiet machine. A frozen row loses nothing; it
# goes on from the same instruction when resumed. The lane itself is left running, so that a
# signal to it still reaches its row (which it resumes to save), and so are the processes that
# called this script, even when their command lines name RUN_DIR too. RUN_DIR names a whole
# path: RUN_DIR2 or RUN_DIR_old is another directory.
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
pattern="$(printf '%s' "$run_dir" | sed 's/[][\.*^$+?(){}|]/\\&/g')(/| |\$)"
for pid in $(pgrep -f -- "$pattern"); do
  case "$callers" in *" $pid "*) continue ;; esac
  case "$(ps -o args= -p "$pid")" in *lane.sh*) continue ;; esac
  kill "-$signal" "$pid" 2>/dev/null
done
echo "$(date -u +%FT%TZ) pause.sh $2" >> "$run_dir/lane.log"
