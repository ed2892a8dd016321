"""Tests of launch/lane.sh (a queue of long commands, one at a time) and launch/pause.sh.

The queue's commands here are short shell lines; a real lane's are training runs.
"""

import os
import pathlib
import signal
import subprocess
import time

import tiny_config

LANE = tiny_config.REPO / "launch" / "lane.sh"
PAUSE = tiny_config.REPO / "launch" / "pause.sh"


def _write_queue(run_dir, *lines):
  (run_dir / "queue").write_text("".join(line + "\n" for line in lines))


def _queue(run_dir):
  return (run_dir / "queue").read_text().splitlines()


def _log_events(run_dir):
  """The lane log's lines without their time stamps: 'start: CMD', 'end (STATUS): CMD'."""
  return [line.split(" ", 1)[1] for line in (run_dir / "lane.log").read_text().splitlines()]


def _wait_for(path, timeout=20):
  deadline = time.monotonic() + timeout
  while not path.exists():
    assert time.monotonic() < deadline, f"{path} never appeared"
    time.sleep(0.05)


def test_runs_the_queue_in_order_in_the_code_directory(tmp_path):
  run_dir, code_dir = tmp_path / "runs", tmp_path / "code"
  run_dir.mkdir()
  code_dir.mkdir()
  _write_queue(run_dir, "pwd >> order", "echo second >> order; exit 1", "echo third >> order")
  result = subprocess.run(["bash", str(LANE), str(run_dir), str(code_dir)], timeout=30,
                          capture_output=True, text=True)
  assert result.returncode == 0, result.stderr
  # A command that fails (status 1) is logged and set aside; the lane goes on.
  assert (code_dir / "order").read_text().splitlines() == [str(code_dir), "second", "third"]
  assert _queue(run_dir) == []
  assert (run_dir / "queue.failed").read_text() == "echo second >> order; exit 1\n"
  assert _log_events(run_dir) == [
      "start: pwd >> order", "end (0): pwd >> order",
      "start: echo second >> order; exit 1", "end (1): echo second >> order; exit 1",
      "start: echo third >> order", "end (0): echo third >> order"]


def test_two_failures_in_a_row_stop_the_lane_and_keep_the_rest_of_the_queue(tmp_path):
  # What a lane started without its environment sees: every command fails at once.
  _write_queue(tmp_path, "exit 1", "echo ok", "exit 1", "false", "touch never_run")
  result = subprocess.run(["bash", str(LANE), str(tmp_path), str(tmp_path)], timeout=30,
                          capture_output=True, text=True)
  assert result.returncode == 3
  assert "two commands in a row failed" in result.stderr
  assert _queue(tmp_path) == ["touch never_run"]
  assert (tmp_path / "queue.failed").read_text().splitlines() == ["exit 1", "exit 1", "false"]
  assert not (tmp_path / "never_run").exists()
  assert _log_events(tmp_path)[-1].startswith("stopped: two commands in a row failed")


def test_a_command_ended_by_a_signal_stops_the_lane_and_keeps_its_line(tmp_path):
  _write_queue(tmp_path, "exit 143", "touch never_run")
  result = subprocess.run(["bash", str(LANE), str(tmp_path), str(tmp_path)], timeout=30)
  assert result.returncode == 143
  assert _queue(tmp_path) == ["exit 143", "touch never_run"]
  assert not (tmp_path / "never_run").exists()
  assert _log_events(tmp_path)[-1] == "end (143): exit 143"


def test_sigterm_reaches_the_running_command_and_the_lane_waits_for_it(tmp_path):
  # Like training: on SIGTERM the command saves, then exits with 128 + 15.
  saving = ("trap 'sleep 0.5; echo saved > saved; exit 143' TERM; touch started; "
            "while true; do sleep 0.1; done")
  _write_queue(tmp_path, saving, "touch never_run")
  lane = subprocess.Popen(["bash", str(LANE), str(tmp_path), str(tmp_path)])
  _wait_for(tmp_path / "started")
  lane.send_signal(signal.SIGTERM)
  assert lane.wait(timeout=30) == 143
  assert (tmp_path / "saved").read_text() == "saved\n"  # the lane waited for the save
  assert _queue(tmp_path) == [saving, "touch never_run"]  # starting again resumes it
  assert not (tmp_path / "never_run").exists()


def test_the_lane_waits_for_a_child_that_outlives_the_lines_shell(tmp_path):
  """A line with a redirection makes its shell fork the command (as `python ... >> log` does):
  the shell dies of SIGTERM at once, the command it started still saves."""
  saving = ("sh -c 'trap \"sleep 0.5; echo saved > saved; exit 143\" TERM; touch started; "
            "while true; do sleep 0.1; done' >> row.log 2>&1")
  _write_queue(tmp_path, saving)
  lane = subprocess.Popen(["bash", str(LANE), str(tmp_path), str(tmp_path)])
  _wait_for(tmp_path / "started")
  lane.send_signal(signal.SIGTERM)
  assert lane.wait(timeout=30) == 143
  assert (tmp_path / "saved").read_text() == "saved\n"
  assert _queue(tmp_path) == [saving]


def test_the_line_removed_is_the_one_that_ran_when_the_queue_changed_meanwhile(tmp_path):
  # The running line puts another before itself, as a campaign reordering its queue does.
  reorder = "{ echo 'echo first >> order'; cat queue; } > queue.new && mv queue.new queue"
  _write_queue(tmp_path, reorder, "echo last >> order")
  result = subprocess.run(["bash", str(LANE), str(tmp_path), str(tmp_path)], timeout=30)
  assert result.returncode == 0
  assert (tmp_path / "order").read_text().splitlines() == ["first", "last"]
  assert _queue(tmp_path) == []
  assert [e for e in _log_events(tmp_path) if e.startswith("start")] == [
      f"start: {reorder}", "start: echo first >> order", "start: echo last >> order"]


def test_the_lane_removes_a_line_only_when_it_holds_the_queue_lock(tmp_path):
  """An edit made under RUN_DIR/queue.lock cannot fall between the lane's read of the queue
  and its write: the lane waits for the lock."""
  _write_queue(tmp_path, "touch ran", "echo next >> order")
  holder = subprocess.Popen(
      ["flock", "queue.lock", "-c", "touch locked; while [ ! -e ran ]; do sleep 0.05; done; "
       "sleep 1; head -n 1 queue > seen; echo 'echo appended >> order' >> queue"],
      cwd=tmp_path)
  _wait_for(tmp_path / "locked")
  result = subprocess.run(["bash", str(LANE), str(tmp_path), str(tmp_path)], timeout=30)
  assert holder.wait(timeout=30) == 0 and result.returncode == 0
  assert (tmp_path / "seen").read_text() == "touch ran\n"   # not removed while locked
  assert (tmp_path / "order").read_text().splitlines() == ["next", "appended"]
  assert _queue(tmp_path) == []


def test_a_paused_row_still_saves_when_the_lane_is_stopped(tmp_path):
  saving = ("trap 'sleep 0.5; echo saved > saved; exit 143' TERM; touch started; "
            "while true; do sleep 0.1; done")
  _write_queue(tmp_path, saving)
  lane = subprocess.Popen(["bash", str(LANE), str(tmp_path), str(tmp_path)])
  _wait_for(tmp_path / "started")
  subprocess.run(["bash", str(PAUSE), str(tmp_path), "stop"], check=True, timeout=30)
  assert _process_state(lane.pid) != "T"              # the lane is left running
  lane.send_signal(signal.SIGTERM)
  assert lane.wait(timeout=30) == 143
  assert (tmp_path / "saved").read_text() == "saved\n"


def test_a_missing_queue_is_a_one_line_error(tmp_path):
  result = subprocess.run(["bash", str(LANE), str(tmp_path)], capture_output=True, text=True,
                          timeout=30)
  assert result.returncode == 2
  assert result.stderr == f"error: no queue file {tmp_path}/queue; write one command per line into it\n"


def _process_state(pid):
  """The one-letter state of /proc/PID/stat: 'T' for a stopped process."""
  stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
  return stat.rsplit(")", 1)[1].split()[0]


def test_pause_freezes_and_resumes_the_processes_that_name_the_run_directory(tmp_path):
  run_dir = tmp_path / "runs"
  run_dir.mkdir()
  # `bash -c SCRIPT NAME` shows NAME on its command line, as training shows its --workdir.
  named = subprocess.Popen(["bash", "-c", "while true; do sleep 0.05; done", str(run_dir / "row")])
  other = subprocess.Popen(["bash", "-c", "while true; do sleep 0.05; done", str(tmp_path / "x")])
  sibling = subprocess.Popen(["bash", "-c", "while true; do sleep 0.05; done",
                              f"{run_dir}_old/row"])     # another directory, a longer name
  try:
    subprocess.run(["bash", str(PAUSE), str(run_dir), "stop"], check=True, timeout=30)
    time.sleep(0.2)
    assert _process_state(named.pid) == "T"
    assert _process_state(other.pid) != "T" and _process_state(sibling.pid) != "T"
    subprocess.run(["bash", str(PAUSE), str(run_dir), "cont"], check=True, timeout=30)
    time.sleep(0.2)
    assert _process_state(named.pid) != "T"
    assert _log_events(run_dir) == ["pause.sh stop", "pause.sh cont"]
  finally:
    for process in (named, other, sibling):
      os.kill(process.pid, signal.SIGCONT)
      process.kill()
      process.wait()


def test_pause_leaves_its_callers_running_when_they_name_the_run_directory(tmp_path):
  """A wrapper "pause; measure; resume" whose own command line names the run directory."""
  run_dir = tmp_path / "runs"
  run_dir.mkdir()
  script = f'bash {PAUSE} "$0" stop && echo measured && bash {PAUSE} "$0" cont'
  result = subprocess.run(["bash", "-c", script, str(run_dir)], capture_output=True, text=True,
                          timeout=30)
  assert result.stdout == "measured\n"
  assert _log_events(run_dir) == ["pause.sh stop", "pause.sh cont"]


def test_pause_refuses_an_unknown_action(tmp_path):
  result = subprocess.run(["bash", str(PAUSE), str(tmp_path), "halt"], capture_output=True,
                          text=True, timeout=30)
  assert result.returncode == 2
  assert result.stderr == "usage: launch/pause.sh RUN_DIR stop|cont\n"
