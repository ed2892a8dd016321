#!/usr/bin/env bash
# The campaign's lane: long training commands from a queue file, one at a time.
#
# usage: launch/lane.sh RUN_DIR [CODE_DIR]
#
# RUN_DIR/queue holds one shell command per line. The lane runs the first line in CODE_DIR (a
# clone at the commit the rows train with; default: this script's repository), writes a line to
# RUN_DIR/lane.log when the command starts and when it ends (with its exit status), removes the
# line when the command exits 0 or 1 (a failed line is appended to RUN_DIR/queue.failed), and
# goes on until the queue is empty. Two failures in a row stop the lane (status 3): the
# environment is likely broken (no venv active: every line would fail in a second). Any other
# status (a signal: the session ended, or the lane was stopped) stops the lane and keeps the
# line, so that starting the lane again resumes that row from its checkpoint.
#
# SIGTERM or SIGINT to the lane is passed on to the command's whole process group (training
# saves its step on it; a group frozen by launch/pause.sh is resumed to do so), and the lane
# waits until every process of the group has finished saving. The line removed when a command
# ends is the one that ran, wherever it stands in the queue by then. The lane rewrites the queue
# holding RUN_DIR/queue.lock; edit it under the same lock while the lane runs, so that no edit
# is lost: flock RUN_DIR/queue.lock -c 'echo "COMMAND" >> RUN_DIR/queue'
set -u

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: launch/lane.sh RUN_DIR [CODE_DIR]  (RUN_DIR/queue: one command per line)" >&2
  exit 2
fi
run_dir=$1
code_dir=${2:-$(cd "$(dirname "$0")/.." && pwd)}
queue=$run_dir/queue
if [ ! -f "$queue" ]; then
  echo "error: no queue file $queue; write one command per line into it" >&2
  exit 2
fi
if [ ! -d "$code_dir" ]; then
  echo "error: no code directory $code_dir; clone the repository there" >&2
  exit 2
fi

set -m  # each command runs in a process group of its own, which a signal reaches whole
command_pid=
stopping=
stop() {
  if [ -z "$command_pid" ]; then exit 143; fi  # between two commands: nothing to save
  stopping=1
  kill -TERM -- "-$command_pid" 2>/dev/null
  kill -CONT -- "-$command_pid" 2>/dev/null  # a paused group saves too
}
trap stop TERM INT

log() { echo "$(date -u +%FT%TZ) $*" >> "$run_dir/lane.log"; }

failures=0  # consecutive commands that exited 1
while line=$(head -n 1 "$queue") && [ -n "$line" ]; do
  log "start: $line"
  (cd "$code_dir" && exec bash -c "$line") &
  command_pid=$!
  wait "$command_pid"
  status=$?
  while kill -0 "$command_pid" 2>/dev/null; do  # a signal to the lane interrupted the wait
    wait "$command_pid"
    status=$?
  done
  # The line's shell may end before its children: `bash -c "python ... >> log"` forks python.
  while [ -n "$stopping" ] && kill -0 -- "-$command_pid" 2>/dev/null; do
    sleep 0.2
  done
  command_pid=
  log "end ($status): $line"
  if [ "$status" -ne 0 ] && [ "$status" -ne 1 ]; then
    exit "$status"
  fi
  if [ "$status" -eq 1 ]; then
    echo "$line" >> "$queue.failed"
    failures=$((failures + 1))
  else
    failures=0
  fi
  (
    flock 9 || log "warning: flock failed: the queue is rewritten without its lock"
    LINE=$line awk '!done && $0 == ENVIRON["LINE"] { done = 1; next } 1' "$queue" > "$queue.tmp" \
      && mv "$queue.tmp" "$queue"
  ) 9> "$queue.lock"
  if [ "$failures" -ge 2 ]; then
    log "stopped: two commands in a row failed (is the environment the rows train in active?); their lines are in $queue.failed"
    echo "error: two commands in a row failed; their lines are in $queue.failed (is the rows' environment, e.g. .venv, active?)" >&2
    exit 3
  fi
done
