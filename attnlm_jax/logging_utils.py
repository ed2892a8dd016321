"""Training logs: a progress bar or plain lines, `metrics.jsonl` and TensorBoard events.

Everything is written by process 0 only. In the workdir:
- `metrics.jsonl`: one JSON object per line; a run starts with a `{"event": "start", ...}`
  line holding the config and the parameter count, then one line per logged step or epoch;
- `tensorboard/`: event files (tensorboardX, no TensorFlow) with the same scalars and the
  config as text.
On a terminal the progress is a tqdm bar (epoch, step, loss, tokens/s); when stderr is not a
terminal or the `CI` environment variable is set it is a plain log line every few steps.
"""

import json
import logging as std_logging
import os
import sys
import time
from typing import Any, Mapping

from absl import logging
from etils import epath
import tqdm

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"


# Orbax warnings about what `checkpoints.py` does on purpose: step checkpoints without a
# metric, and read-only managers for evaluation and workdir checks.
_EXPECTED_ORBAX_WARNINGS = ("did not provide metrics", "read_only=True", "is read only")


class _OrbaxFilter(std_logging.Filter):
  """Drops Orbax's info lines and its warnings about intended behaviour."""

  def filter(self, record: std_logging.LogRecord) -> bool:
    if f"{os.sep}orbax{os.sep}" not in record.pathname:
      return True
    message = record.getMessage()
    return (record.levelno >= std_logging.WARNING
            and not any(text in message for text in _EXPECTED_ORBAX_WARNINGS))


def quiet_libraries() -> None:
  """Keeps the log to this project's lines and the libraries' warnings (idempotent).

  Orbax logs its save/restore details through absl; JAX logs its backend probing (e.g. "no
  TPU found") through its own logger.
  """
  absl_logger = std_logging.getLogger("absl")
  if not any(isinstance(f, _OrbaxFilter) for f in absl_logger.filters):
    absl_logger.addFilter(_OrbaxFilter())
  std_logging.getLogger("jax").setLevel(std_logging.WARNING)


def interactive() -> bool:
  """True when stderr is a terminal and not under CI: show a progress bar."""
  return sys.stderr.isatty() and not os.environ.get("CI")


class MetricWriter:
  """Appends metrics to `workdir/metrics.jsonl` and TensorBoard event files."""

  def __init__(self, workdir: epath.Path, enabled: bool = True):
    """Opens the writers; with enabled=False (processes other than 0) it writes nothing."""
    self._jsonl = None
    self._tensorboard = None
    if enabled:
      workdir.mkdir(parents=True, exist_ok=True)
      self._jsonl = (workdir / METRICS_FILE).open("a")
      # Imported here: it takes seconds, and evaluation, scoring and sampling never write.
      import tensorboardX  # pylint: disable=g-import-not-at-top
      self._tensorboard = tensorboardX.SummaryWriter(os.fspath(workdir / TENSORBOARD_DIR))

  def write_start(self, step: int, config_json: str, num_params: int, **extra: Any) -> None:
    """Records the start (or resumption) of a run with its config and parameter count."""
    record = {"event": "start", "step": step, "num_params": num_params, **extra,
              "config": json.loads(config_json)}
    self._write_line(record)
    if self._tensorboard is not None:
      self._tensorboard.add_text("config", f"```\n{config_json}\n```", step)
      self._tensorboard.add_text("num_params", str(num_params), step)
    logging.info("parameters: %d; %s", num_params,
                 ", ".join(f"{k}: {v}" for k, v in extra.items()))

  def write_scalars(self, step: int, scalars: Mapping[str, float]) -> None:
    """One `metrics.jsonl` line {"step": step, **scalars} and a TensorBoard scalar each."""
    self._write_line({"step": step, **scalars})
    if self._tensorboard is not None:
      for name, value in scalars.items():
        if isinstance(value, (int, float)):
          self._tensorboard.add_scalar(name, value, step)

  def _write_line(self, record: dict) -> None:
    if self._jsonl is not None:
      self._jsonl.write(json.dumps(record) + "\n")
      self._jsonl.flush()

  def close(self) -> None:
    """Flushes and closes the files."""
    if self._jsonl is not None:
      self._jsonl.close()
      self._tensorboard.close()
      self._jsonl = self._tensorboard = None


class Progress:
  """Progress of one epoch: a tqdm bar on a terminal, else one log line per `report`."""

  def __init__(self, epoch: int, total: int, done: int, enabled: bool = True):
    """Starts the epoch's progress at `done` of `total` batches (done > 0 when resuming)."""
    self._epoch = epoch
    self._total = total
    self._done = done
    self._bar = None
    if enabled and interactive():
      self._bar = tqdm.tqdm(total=total, initial=done, desc=f"epoch {epoch}", unit="batch",
                            dynamic_ncols=True, leave=False)
    self._enabled = enabled
    self._tokens = 0
    self._since = time.perf_counter()

  def advance(self, tokens: int) -> None:
    """Counts one trained batch holding `tokens` predicted tokens."""
    self._done += 1
    self._tokens += tokens
    if self._bar is not None:
      self._bar.update(1)

  def report(self, step: int, loss: float) -> float:
    """Shows step, loss and tokens/s since the last report; returns the tokens/s."""
    now = time.perf_counter()
    rate = self._tokens / max(now - self._since, 1e-9)
    self._tokens, self._since = 0, now
    if self._bar is not None:
      self._bar.set_postfix(step=step, loss=f"{loss:.3f}", tok_s=f"{rate:.0f}")
    elif self._enabled:
      logging.info("epoch %d  batch %d/%d  step %d  loss %.4f  %.0f tokens/s", self._epoch,
                   self._done, self._total, step, loss, rate)
    return rate

  def close(self) -> None:
    """Removes the bar."""
    if self._bar is not None:
      self._bar.close()
      self._bar = None
