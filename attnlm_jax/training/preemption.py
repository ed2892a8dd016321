"""Stopping a training run cleanly on SIGTERM or SIGINT: the loop finishes its step, saves, and
raises `Stopped`, the command's one line and exit status 128 + the signal's number; in
multi-process runs every process stops at the same step (docs/training.md, "Stopping,
preemption and one run per workdir")."""

import signal
import threading
from typing import Optional

from absl import logging
import jax
from jax.experimental import multihost_utils

# The signals that stop a single-process run cleanly.
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stopped(Exception):
  """Training stopped on a signal after saving; the message is the line to print.

  Attributes:
    signal_number: the signal that stopped the run (SIGTERM or SIGINT).
    exit_status: the conventional exit status for it, 128 + the signal number.
  """

  def __init__(self, signal_number: int, message: str):
    super().__init__(message)
    self.signal_number = signal_number
    self.exit_status = 128 + signal_number


def signal_name(signal_number: int) -> str:
  """"SIGTERM" for 15, and so on."""
  return signal.Signals(signal_number).name


def stopped_message(signal_number: int, step: int, epoch: int, batch: int) -> str:
  """The one line a run stopped by a signal prints."""
  return (f"stopped by {signal_name(signal_number)} at step {step} (epoch {epoch}, batch "
          f"{batch}): saved; rerun the same command to resume")


class StopSignals:
  """Context manager: while active, SIGTERM and SIGINT ask the training loop to stop.

  Outside the main thread (where Python cannot install handlers) it installs nothing and
  `should_stop` only follows JAX's multi-process preemption notice; the handlers it replaced
  are put back on exit.
  """

  def __init__(self):
    self._received: Optional[int] = None
    self._previous = {}
    self._multiprocess = False
    self._at_once: Optional[str] = None

  def __enter__(self) -> "StopSignals":
    self._multiprocess = jax.process_count() > 1
    if threading.current_thread() is not threading.main_thread():
      return self
    # Several processes: SIGTERM belongs to JAX's preemption service, and a SIGINT that
    # reached one process only could not stop the others at the same step.
    for number in () if self._multiprocess else SIGNALS:
      self._previous[number] = signal.signal(number, self._handle)
    return self

  def __exit__(self, *exc_info) -> None:
    for number, handler in self._previous.items():
      signal.signal(number, handler)
    self._previous.clear()

  def _handle(self, signal_number: int, frame) -> None:
    del frame
    if self._at_once is not None:
      self._received = signal_number
      raise Stopped(signal_number, self._at_once.format(signal=signal_name(signal_number)))
    if self._received is None:
      self._received = signal_number
      logging.warning("%s received: finishing the current step, then saving",
                      signal_name(signal_number))
    else:
      logging.warning("%s received again: still saving the checkpoint; it stops when the "
                      "save is complete", signal_name(signal_number))

  def at_once(self, message: str) -> None:
    """From now on a signal raises Stopped at once, with `message` ("{signal}" in it names
    the signal), for when nothing is left to save; a signal already received raises it now."""
    self._at_once = message
    if self._received is not None:
      raise Stopped(self._received, message.format(signal=signal_name(self._received)))

  @property
  def received(self) -> Optional[int]:
    """The signal that asked the run to stop (SIGTERM for a multi-process preemption notice),
    or None."""
    return self._received

  def should_stop(self, step: int) -> bool:
    """True when the run should save and stop after `step`.

    In a multi-process run every process must call this at every step (it is JAX's
    preemption sync point); it turns True on all of them at the same step.
    """
    if self._multiprocess:
      if multihost_utils.reached_preemption_sync_point(step):
        self._received = self._received or signal.SIGTERM
        return True
      return False
    return self._received is not None
