"""One training run per workdir: the lock file, its refusal and the take-over of a stale one
(the command-line runs are in test_checkpoints.py)."""

import json
import os
import socket
import subprocess

import pytest

from attnlm_jax.training import workdir_lock


def _dead_pid() -> int:
  """The pid of a process that has exited."""
  process = subprocess.Popen(["true"])
  process.wait()
  return process.pid


def _write_lock(workdir, host: str, pid: int) -> None:
  (workdir / workdir_lock.LOCK_FILE).write_text(
      json.dumps({"host": host, "pid": pid, "started": "2026-01-01T00:00:00+00:00"}))


def test_the_lock_names_its_holder_and_goes_when_released(tmp_path):
  workdir = tmp_path / "run"                                  # made by the lock
  with workdir_lock.WorkdirLock(workdir):
    holder = json.loads((workdir / workdir_lock.LOCK_FILE).read_text())
    assert (holder["host"], holder["pid"]) == (socket.gethostname(), os.getpid())
  assert not (workdir / workdir_lock.LOCK_FILE).exists()


def test_a_held_lock_refuses_a_second_run_and_stays(tmp_path):
  with workdir_lock.WorkdirLock(tmp_path):
    before = (tmp_path / workdir_lock.LOCK_FILE).read_text()
    with pytest.raises(workdir_lock.WorkdirBusy,
                       match=rf"in use by the training run of pid {os.getpid()} on "):
      workdir_lock.WorkdirLock(tmp_path).acquire()
    assert (tmp_path / workdir_lock.LOCK_FILE).read_text() == before


def test_a_lock_of_a_process_gone_from_this_host_is_taken_over(tmp_path, caplog):
  pid = _dead_pid()
  _write_lock(tmp_path, socket.gethostname(), pid)
  with workdir_lock.WorkdirLock(tmp_path):
    assert json.loads((tmp_path / workdir_lock.LOCK_FILE).read_text())["pid"] == os.getpid()
  assert f"pid {pid}" in caplog.text and "no longer exists" in caplog.text
  assert sorted(p.name for p in tmp_path.iterdir()) == []     # nothing left behind


def test_a_lock_from_another_host_is_not_taken_over(tmp_path):
  _write_lock(tmp_path, "another-host", _dead_pid())
  with pytest.raises(workdir_lock.WorkdirBusy, match="on another-host"):
    workdir_lock.WorkdirLock(tmp_path).acquire()


def test_an_unreadable_lock_refuses_and_says_how_to_remove_it(tmp_path):
  (tmp_path / workdir_lock.LOCK_FILE).write_text("{not json")
  with pytest.raises(workdir_lock.WorkdirBusy,
                     match=r"lock file cannot be read.*remove .*train\.lock$"):
    workdir_lock.WorkdirLock(tmp_path).acquire()


def test_a_disabled_lock_writes_nothing(tmp_path):
  with workdir_lock.WorkdirLock(tmp_path, enabled=False):
    assert not (tmp_path / workdir_lock.LOCK_FILE).exists()
