"""One training run per workdir: `workdir/train.lock` names the run that holds it, a second run
is refused in one line, and the lock of a process gone from this host is taken over
(docs/training.md, "Stopping, preemption and one run per workdir")."""

import datetime
import json
import os
import socket
from typing import Optional

from absl import logging
from etils import epath

from attnlm_jax.common import errors
from attnlm_jax.common import logging_utils

LOCK_FILE = "train.lock"


class WorkdirBusy(errors.UserError):
  """Another training run holds the workdir's lock."""


def _process_exists(pid: int) -> bool:
  """True when a process `pid` exists on this host (signal 0 checks without sending)."""
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True  # It exists, under another user.
  return True


class WorkdirLock:
  """Context manager holding `workdir/train.lock` while a run trains there (`acquire` on
  entry, `release` on exit)."""

  def __init__(self, workdir, enabled: bool = True):
    """Args: workdir: the run's directory; enabled: False takes no lock (processes > 0)."""
    self.path = epath.Path(workdir) / LOCK_FILE
    self._enabled = enabled
    self._held = False
    self._holder = {"host": socket.gethostname(), "pid": os.getpid(),
                    "started": datetime.datetime.now(datetime.timezone.utc).isoformat(
                        timespec="seconds")}

  def __enter__(self) -> "WorkdirLock":
    self.acquire()
    return self

  def __exit__(self, *exc_info) -> None:
    self.release()

  def acquire(self) -> None:
    """Takes the lock (nothing when disabled or held already).

    Raises:
      WorkdirBusy: a live process (or one on another host) holds it.
    """
    if not self._enabled or self._held:
      return
    self.path.parent.mkdir(parents=True, exist_ok=True)
    if not self._create():
      holder = self._read()
      if holder is None or not self._is_stale(holder):
        raise WorkdirBusy(self._busy_message(holder))
      logging.warning("taking over %s: the run that held it (pid %s on %s, started %s) no "
                      "longer exists", self.path, holder["pid"], holder["host"],
                      holder["started"])
      self._take_over(holder)
    self._held = True

  def release(self) -> None:
    """Removes the lock file if this run holds it."""
    if self._held:
      self.path.unlink(missing_ok=True)
      self._held = False

  def _create(self) -> bool:
    """Creates the lock file holding this run; False when it exists already."""
    text = json.dumps(self._holder)
    if logging_utils.is_remote(self.path):
      if self.path.exists():
        return False
      self.path.write_text(text)
      return True
    try:
      descriptor = os.open(os.fspath(self.path), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
      return False
    with os.fdopen(descriptor, "w") as file:
      file.write(text)
    return True

  def _read(self) -> Optional[dict]:
    """The holder recorded in the lock file; None when it vanished or cannot be parsed."""
    try:
      holder = json.loads(self.path.read_text())
    except (FileNotFoundError, ValueError):
      return None
    return holder if isinstance(holder, dict) and {"host", "pid", "started"} <= holder.keys() \
        else None

  def _is_stale(self, holder: dict) -> bool:
    """True when the holder ran on this host and its process is gone."""
    return holder["host"] == socket.gethostname() and not _process_exists(int(holder["pid"]))

  def _take_over(self, stale: dict) -> None:
    """Replaces a stale lock by this run's; refuses if another run took it over first.

    The stale file is renamed aside before this run creates its own with O_EXCL; a file
    renamed aside that is not the stale one (another run took over in between) is put back.
    """
    aside = self.path.parent / f"{LOCK_FILE}.stale.{os.getpid()}"
    try:
      self.path.rename(aside)
    except FileNotFoundError:
      pass  # Another run moved it first: the create below decides.
    else:
      if json.loads(aside.read_text() or "null") != stale:
        aside.rename(self.path)
        raise WorkdirBusy(self._busy_message(self._read()))
      aside.unlink()
    if not self._create():
      raise WorkdirBusy(self._busy_message(self._read() or stale))

  def _busy_message(self, holder: Optional[dict]) -> str:
    """The one line refusing a second run."""
    if holder is None:
      who = "another training run (its lock file cannot be read)"
    else:
      who = (f"the training run of pid {holder['pid']} on {holder['host']}, started "
             f"{holder['started']}")
    return (f"{self.path.parent} is in use by {who}: wait for it to end, stop it (kill -TERM "
            f"saves it), or train in another --workdir; if that run is gone for good, remove "
            f"{self.path}")
