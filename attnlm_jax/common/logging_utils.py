"""Training logs: a progress bar (or plain lines off a terminal), `metrics.jsonl` (a start record,
then a line per logged step and epoch) and TensorBoard events, written by process 0 and copied
to a remote workdir every `MIRROR_SECONDS` (docs/training.md, "What goes in the workdir")."""

import json
import logging as std_logging
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Mapping

from absl import logging
from etils import epath
import tqdm

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
# Seconds between copies of the logs to a remote workdir.
MIRROR_SECONDS = 60.0


# Seconds of waiting before a progress bar shows.
PROGRESS_DELAY_SECONDS = 3.0

# Library log lines to drop, by the package directory they come from: info lines, and the
# warnings listed, which are about what this project does on purpose (Orbax: step checkpoints
# without a metric, read-only managers for evaluation and workdir checks).
_QUIETED = {"orbax": ("did not provide metrics", "read_only=True", "is read only"),
            "tensorflow_datasets": ()}


class _LibraryFilter(std_logging.Filter):
  """Drops a library's info lines and its warnings about intended behaviour."""

  def __init__(self, package: str, expected_warnings: tuple[str, ...]):
    super().__init__()
    self._directory = f"{os.sep}{package}{os.sep}"
    self._expected = expected_warnings

  def filter(self, record: std_logging.LogRecord) -> bool:
    if self._directory not in record.pathname:
      return True
    message = record.getMessage()
    return (record.levelno >= std_logging.WARNING
            and not any(text in message for text in self._expected))


class _AbandonedTasksFilter(std_logging.Filter):
  """Drops asyncio's "Task exception was never retrieved": the other reads of a damaged
  checkpoint, failing after the first failure was raised (see `quiet_libraries`)."""

  def filter(self, record: std_logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Task exception was never retrieved")


class _DropAbandonedReads:
  """A sys.unraisablehook: drops "Event loop is closed" (see `quiet_libraries`) and passes
  every other report on to the hook it replaced."""

  def __init__(self, replaced_hook):
    self._replaced_hook = replaced_hook

  def __call__(self, unraisable) -> None:
    if not (isinstance(unraisable.exc_value, RuntimeError)
            and str(unraisable.exc_value) == "Event loop is closed"):
      self._replaced_hook(unraisable)


def quiet_libraries() -> None:
  """Keeps the log to this project's lines and the libraries' warnings (idempotent).

  Orbax and TFDS log their save/restore and preparation details through absl; JAX logs its
  backend probing (e.g. "no TPU found") through its own logger. When Orbax fails to read a
  damaged checkpoint, its other reads still under way finish later on tensorstore threads
  and report "Event loop is closed" to `sys.unraisablehook`, or fail themselves and are
  logged by asyncio as never retrieved: those reports are dropped (the failure itself is
  reported once, by `checkpoints.Checkpoints.restore`).
  """
  absl_logger = std_logging.getLogger("absl")
  if not any(isinstance(f, _LibraryFilter) for f in absl_logger.filters):
    for package, expected in _QUIETED.items():
      absl_logger.addFilter(_LibraryFilter(package, expected))
  std_logging.getLogger("jax").setLevel(std_logging.WARNING)
  asyncio_logger = std_logging.getLogger("asyncio")
  if not any(isinstance(f, _AbandonedTasksFilter) for f in asyncio_logger.filters):
    asyncio_logger.addFilter(_AbandonedTasksFilter())
  if not isinstance(sys.unraisablehook, _DropAbandonedReads):
    sys.unraisablehook = _DropAbandonedReads(sys.unraisablehook)


def progress_bar(description: str, total: int | None = None, unit: str = "it",
                 initial: int = 0, delay: float = PROGRESS_DELAY_SECONDS) -> tqdm.tqdm:
  """A progress bar on stderr, counting from `initial`, for a wait of more than a few
  seconds: shown on a terminal after `delay` seconds, not under CI or into a log file (see
  `interactive`)."""
  return tqdm.tqdm(desc=description, total=total, initial=initial, unit=unit, file=sys.stderr,
                   delay=delay, disable=not interactive(), leave=False, dynamic_ncols=True)


def interactive() -> bool:
  """True when stderr is a terminal and not under CI: show a progress bar."""
  return sys.stderr.isatty() and not os.environ.get("CI")


class MetricWriter:
  """Appends metrics to `workdir/metrics.jsonl` and TensorBoard event files."""

  def __init__(self, workdir: epath.Path, enabled: bool = True):
    """Opens the writers; with enabled=False (processes other than 0) it writes nothing."""
    self._jsonl = None
    self._tensorboard = None
    self._workdir = epath.Path(workdir)
    self._local = None  # The local directory written to, when the workdir is remote.
    self._mirrored = time.monotonic()
    if enabled:
      self._workdir.mkdir(parents=True, exist_ok=True)
      root = self._workdir
      if is_remote(self._workdir):
        root = self._local = epath.Path(tempfile.mkdtemp(prefix="attnlm_logs_"))
        if (self._workdir / METRICS_FILE).exists():
          (self._workdir / METRICS_FILE).copy(root / METRICS_FILE)
      _drop_cut_off_line(root / METRICS_FILE)
      self._jsonl = (root / METRICS_FILE).open("a")
      # Imported here: it takes seconds, and evaluation, scoring and sampling never write.
      import tensorboardX  # pylint: disable=g-import-not-at-top
      self._tensorboard = tensorboardX.SummaryWriter(os.fspath(root / TENSORBOARD_DIR))

  def write_start(self, step: int, config_json: str, num_params: int, **extra: Any) -> None:
    """Records the start (or resumption) of a run with its config and parameter count."""
    self.write_event("start", step, num_params=num_params, **extra,
                     config=json.loads(config_json))
    if self._tensorboard is not None:
      self._tensorboard.add_text("config", f"```\n{config_json}\n```", step)
      self._tensorboard.add_text("num_params", str(num_params), step)
    logging.info("parameters: %d; %s", num_params,
                 ", ".join(f"{k}: {v}" for k, v in extra.items()))

  def write_event(self, event: str, step: int, **fields: Any) -> None:
    """One `metrics.jsonl` line {"event": event, "step": step, **fields}."""
    self._write_line({"event": event, "step": step, **fields})

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
      if self._local is not None and time.monotonic() - self._mirrored > MIRROR_SECONDS:
        self._tensorboard.flush()
        self._mirror()

  def _mirror(self) -> None:
    """Copies the local files (flushed) to the remote workdir."""
    for path in [self._local / METRICS_FILE, *(self._local / TENSORBOARD_DIR).iterdir()]:
      target = self._workdir / path.relative_to(self._local)
      target.parent.mkdir(parents=True, exist_ok=True)
      path.copy(target, overwrite=True)
    self._mirrored = time.monotonic()

  def close(self) -> None:
    """Flushes and closes the files (and copies them to a remote workdir)."""
    if self._jsonl is not None:
      self._jsonl.close()
      self._tensorboard.close()
      if self._local is not None:
        self._mirror()
        shutil.rmtree(self._local)
      self._jsonl = self._tensorboard = self._local = None


def _drop_cut_off_line(path: epath.Path) -> None:
  """Cuts off the end of a local metrics file after its last newline: a record a hard kill
  stopped part-way, to which the resumed run's first record would be glued."""
  data = path.read_bytes() if path.exists() else b""
  if data and not data.endswith(b"\n"):
    os.truncate(path, data.rfind(b"\n") + 1)


def is_remote(path: str | os.PathLike) -> bool:
  """True for a path of a remote file system (`gs://`, `s3://`, ...), False for a local one."""
  return "://" in os.fspath(path)


class Progress:
  """Progress of one epoch: a tqdm bar on a terminal, else one log line per `report`.

  The tokens/s it reports are measured between two points where the loop waited for the
  devices (reading the training sums), so they count work done, not steps dispatched; the
  clock starts after the epoch's first step (`start_clock`), which may include compilation.
  A log line also says when the epoch's batches will be done, at the mean time per batch
  since the clock started (a bar shows tqdm's estimate).
  """

  def __init__(self, epoch: int, total: int, done: int, enabled: bool = True):
    """Starts the epoch's progress at `done` of `total` batches (done > 0 when resuming)."""
    self._epoch = epoch
    self._total = total
    self._done = done
    self._bar = None
    if enabled and interactive():
      # Shown from the epoch's start (no delay): an epoch is a wait of minutes.
      self._bar = progress_bar(f"epoch {epoch}", total, unit="batch", initial=done, delay=0)
    self._enabled = enabled
    self._since = None
    self._tokens_before = 0
    self._clock_start = None   # (time, batches done) when the clock started.

  def advance(self) -> None:
    """Counts one trained batch."""
    self._done += 1
    if self._bar is not None:
      self._bar.update(1)

  def needs_clock(self) -> bool:
    """True until `start_clock` is called."""
    return self._since is None

  def start_clock(self, tokens_so_far: int) -> None:
    """Starts timing once the devices have finished the steps behind `tokens_so_far` (the
    tokens since the last report, which the first rate then leaves out)."""
    self._since = time.perf_counter()
    self._tokens_before = tokens_so_far
    self._clock_start = (self._since, self._done)

  def report(self, step: int, loss: float, tokens: int) -> float:
    """Shows step, loss and tokens/s since the last report; returns the tokens/s.

    Args:
      step: the current step.
      loss: the mean token loss since the last report.
      tokens: the tokens trained on since the last report, all finished on the devices.
    """
    now = time.perf_counter()
    rate = (tokens - self._tokens_before) / max(now - (self._since or now), 1e-9)
    self._since, self._tokens_before = now, 0
    if self._bar is not None:
      self._bar.set_postfix(step=step, loss=f"{loss:.3f}", tok_s=f"{rate:.0f}")
    elif self._enabled:
      logging.info("epoch %d  batch %d/%d  step %d  loss %.4f  %.0f tokens/s%s", self._epoch,
                   self._done, self._total, step, loss, rate, self._time_left(now))
    return rate

  def _time_left(self, now: float) -> str:
    """'  epoch done in 12m05s': the batches left at the mean time per batch since the clock
    started; '' before a batch has been timed."""
    started, done_then = self._clock_start or (now, self._done)
    timed = self._done - done_then
    if timed <= 0:
      return ""
    seconds = round((now - started) / timed * (self._total - self._done))
    hours, minutes = divmod(seconds // 60, 60)
    left = (f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds % 60:02d}s" if minutes
            else f"{seconds}s")
    return f"  epoch done in {left}"

  def close(self) -> None:
    """Removes the bar."""
    if self._bar is not None:
      self._bar.close()
      self._bar = None
