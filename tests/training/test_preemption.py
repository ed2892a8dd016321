"""The signal handling of a training run (the runs themselves: test_checkpoints.py)."""

import os
import signal

import pytest

from attnlm_jax.training import preemption


def test_the_first_signal_asks_to_stop_a_second_changes_nothing_and_handlers_come_back():
  before = {number: signal.getsignal(number) for number in preemption.SIGNALS}
  with preemption.StopSignals() as stop:
    assert not stop.should_stop(1) and stop.received is None
    os.kill(os.getpid(), signal.SIGTERM)          # would end the test process unhandled
    assert stop.should_stop(2) and stop.received == signal.SIGTERM
    os.kill(os.getpid(), signal.SIGINT)           # would raise KeyboardInterrupt unhandled
    assert stop.received == signal.SIGTERM
  assert {number: signal.getsignal(number) for number in preemption.SIGNALS} == before


def test_the_stopped_line_and_exit_status():
  stopped = preemption.Stopped(signal.SIGTERM, preemption.stopped_message(
      signal.SIGTERM, step=1200, epoch=3, batch=115))
  assert str(stopped) == ("stopped by SIGTERM at step 1200 (epoch 3, batch 115): saved; rerun "
                          "the same command to resume")
  assert (stopped.exit_status, preemption.Stopped(signal.SIGINT, "").exit_status) == (143, 130)


def test_after_at_once_a_signal_stops_at_once():
  with preemption.StopSignals() as stop:
    stop.at_once("stopped by {signal} with nothing left to save")
    with pytest.raises(preemption.Stopped, match="^stopped by SIGINT with nothing left") as e:
      os.kill(os.getpid(), signal.SIGINT)
    assert e.value.exit_status == 130
  with preemption.StopSignals() as stop:
    os.kill(os.getpid(), signal.SIGTERM)          # received while there was still work to save
    with pytest.raises(preemption.Stopped, match="^stopped by SIGTERM"):
      stop.at_once("stopped by {signal}")
