"""What a table's row directory holds (`read`): the row's status, size, epochs and
perplexities, in the words the pages use."""

from typing import Optional

from etils import epath

from attnlm_jax.common import errors
from attnlm_jax.common import json_io
from attnlm_jax.common import logging_utils
from attnlm_jax.experiments import runs
from attnlm_jax.experiments import tables
from attnlm_jax.tagger import tagging

FINISHED = "finished"
NOT_STARTED = "not started"
RUNNING = "running"  # Started, not finished: a status "running: epoch k of n".
DIVERGED = "diverged"  # Its last session diverged: a status "diverged: step s".
STALE = "stale"  # An interpolation whose member trained again since: "stale: lstm trained again".
INTERPOLATION_FILE = "interpolation.json"  # An interpolation row's result, in its directory.
# The key of INTERPOLATION_FILE that holds each member's test perplexity by its log when mixed.
MEMBER_LOGS = "member_test_perplexity"
SPLITS = ("valid", "test")


def _training_state(row_dir: epath.Path) -> dict:
  """Status, parameter count, epochs and final perplexities of a training row; a running
  row's best epoch so far, with its "best_valid_perplexity" and "last_epoch_seconds"."""
  if not (row_dir / logging_utils.METRICS_FILE).exists():
    return {"status": NOT_STARTED}
  run = runs.read_run(row_dir)
  state = {"status": FINISHED, "params": run["params"], "best_epoch": run["best_epoch"],
           "untested_best_epoch": run["untested_best_epoch"],
           "epochs_run": run["epochs_run"], "valid_curve": run["valid_curve"],
           "ran_on": run["ran_on"], "code_versions": run["code_versions"],
           "epoch_seconds": run["epoch_seconds"],
           "fastest_epoch_seconds": run["fastest_epoch_seconds"],
           **{key: run[key] for key in runs.RUN_KEYS}}
  if run["diverged"]:
    state.update(status=f"{DIVERGED}: step {run['diverged']['step']}",
                 diverged=run["diverged"])
  elif not run["finished"]:
    state.update(status=f"{RUNNING}: epoch {run['epochs_run']} of {run['num_epochs']}",
                 best_valid_perplexity=run["best_valid_perplexity"],
                 last_epoch_seconds=run["last_epoch_seconds"],
                 patience_ends=_patience_ends(run))
  return state


def _patience_ends(run: dict) -> Optional[int]:
  """The epoch after which early stopping ends a running row unless an epoch before it
  improves on the best so far: best epoch + patience, when that comes before the row's last
  epoch (else None, as when the log does not record them)."""
  known = None not in (run["best_epoch"], run["patience"], run["num_epochs"])
  if known and run["best_epoch"] + run["patience"] < run["num_epochs"]:
    return run["best_epoch"] + run["patience"]
  return None


def _tagger_state(row_dir: epath.Path) -> dict:
  """Status, parameter count and test accuracy of a tagger row (and at the test words read as
  `<unk>`, for a tagger scored on the text as an LM corpus shows it; None otherwise)."""
  if not (row_dir / tagging.META_FILE).exists():
    return {"status": NOT_STARTED}
  metrics = tagging.read_meta(row_dir)["metrics"]
  return {"status": FINISHED, "params": metrics["num_params"],
          "test_accuracy": metrics["test_accuracy"],
          "test_accuracy_unk": metrics.get("test_accuracy_unk")}


def member_test_perplexity(member_dir: epath.Path) -> Optional[float]:
  """A member's test perplexity by its log (None without a finished one): the same log, the
  same model; a member trained again, on another machine or code, ends elsewhere."""
  return _training_state(member_dir).get("test_perplexity")


def _interpolation_state(row_dir: epath.Path) -> dict:
  """Status and perplexities of an interpolation row; "stale: M trained again" when a member's
  log no longer ends where it did when mixed (rerunning the row mixes them anew)."""
  if not (row_dir / INTERPOLATION_FILE).exists():
    return {"status": NOT_STARTED}
  mixture = json_io.read_json(row_dir / INTERPOLATION_FILE, errors.UserError,
                              "delete it: the row mixes its members again", results=True)
  retrained = [member for member, test in mixture.get(MEMBER_LOGS, {}).items()
               if member_test_perplexity(row_dir.parent / member) != test]
  return {"status": f"{STALE}: {', '.join(retrained)} trained again" if retrained else FINISHED,
          "weights": mixture["test"]["weights"],
          **{f"{split}_{key}": mixture[split][key] for split in SPLITS
             for key in ("perplexity", "perplexity_paper_convention")}}


_STATE_READERS = {tables.TRAIN: _training_state, tables.TAGGER: _tagger_state,
                  tables.INTERPOLATE: _interpolation_state}


def read(row: tables.Row, workdir: epath.Path) -> dict:
  """What workdir/<row> holds: {"status": FINISHED, NOT_STARTED, "running: epoch k of n",
  "diverged: step s" or "stale: M trained again" (the statuses of `table_page`), ...}."""
  return _STATE_READERS[row.kind](row.directory(workdir))
