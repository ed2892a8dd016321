"""logging_utils.quiet_libraries: which library reports it drops and which it passes on."""

import gc
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
