"""logging_utils.quiet_libraries: which library reports it drops and which it passes on."""

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
