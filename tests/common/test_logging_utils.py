"""logging_utils: which library reports quiet_libraries drops and which it passes on; what
a progress line says."""

import asyncio
import gc
import logging
import sys

from attnlm_jax.common import logging_utils


class _RaisesWhenCollected:
  """An object whose finaliser raises, as tensorstore's abandoned reads do."""

  def __init__(self, message):
    self.message = message

  def __del__(self):
    raise RuntimeError(self.message)


def test_only_the_abandoned_reads_report_is_dropped_and_others_reach_the_old_hook(
    monkeypatch):
  reported = []
  monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: reported.append(
      str(unraisable.exc_value)))
  logging_utils.quiet_libraries()

  _RaisesWhenCollected("Event loop is closed")
  _RaisesWhenCollected("a real failure")
  gc.collect()

  assert reported == ["a real failure"]


def test_an_abandoned_read_task_is_not_logged_and_other_asyncio_errors_are(caplog):
  """A failed task nobody awaited, as the other reads of a damaged checkpoint end, is
  dropped; any other asyncio error still reaches the log."""
  logging_utils.quiet_libraries()

  async def fails():
    raise ValueError("OUT_OF_RANGE: Error reading a truncated checkpoint")

  loop = asyncio.new_event_loop()
  task = loop.create_task(fails())
  loop.run_until_complete(asyncio.sleep(0))
  loop.close()
  with caplog.at_level(logging.ERROR, logger="asyncio"):
    del task
    gc.collect()
    logging.getLogger("asyncio").error("Unclosed client session")
  assert [r.getMessage() for r in caplog.records] == ["Unclosed client session"]


def test_a_progress_line_says_when_the_epochs_batches_will_be_done(monkeypatch, caplog):
  """At the mean time per batch since the clock started: 10 batches in 10 s with 1,290 left,
  then 50 in 150 s with 1,250 left."""
  clock = iter([100.0, 110.0, 250.0])  # start_clock, then each report
  monkeypatch.setattr(logging_utils.time, "perf_counter", lambda: next(clock))
  monkeypatch.setattr(logging_utils, "interactive", lambda: False)
  progress = logging_utils.Progress(epoch=2, total=1301, done=0)
  progress.advance()                   # the first batch, with its compilation: not timed
  progress.start_clock(tokens_so_far=0)
  with caplog.at_level(logging.INFO, logger="absl"):
    for batches, step in ((10, 11), (40, 51)):
      for _ in range(batches):
        progress.advance()
      progress.report(step=step, loss=5.0, tokens=1000)
  lines = [record.getMessage() for record in caplog.records]
  assert lines[0].startswith("epoch 2  batch 11/1301  step 11")
  assert lines[0].endswith("100 tokens/s  epoch done in 21m30s")
  assert lines[1].endswith("epoch done in 1h02m")
