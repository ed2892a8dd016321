"""A row's evaluation by the test-time methods, on disk: what its results depend on
(`settings`), the results (ROW_FILE) and what an evaluation stopped part-way made
(PROGRESS_FILE, `PartialResults`), reused while made with the same and refused when made with
other flags (`check_flags`), and the row's cache over the output layer's h'_t
(HEAD_CACHE_FILE). `testtime_page` writes a table's page from them."""

from typing import Optional, Sequence

from absl import logging
from etils import epath

from attnlm_jax.common import errors
from attnlm_jax.common import json_io
from attnlm_jax.evaluation import evaluate
from attnlm_jax.testtime import cache
from attnlm_jax.testtime import dynamic_eval
from attnlm_jax.training import checkpoints

ROW_FILE = "testtime.json"                  # In the row's directory: its results.
PROGRESS_FILE = "testtime_progress.json"    # What an evaluation stopped part-way made.
HEAD_CACHE_FILE = "cache_head.json"         # The row's cache over h'_t, made by:
HEAD_CACHE_COMMAND = "--mode=evaluate --split=test --cache=SIZE --cache_states=head"
METHODS = ("cache", "dynamic_sgd", "dynamic_rms")   # The methods, by their keys in the results.
# The two perplexity rules (`losses.py`), by their keys in the results.
RULES = {"perplexity": "every token predicted",
         "perplexity_paper_convention": "the released code's rule: a sentence's first word "
                                        "not predicted but counted"}
SCORED_SPLIT = "test"                       # The split a method is scored on.
# The command line's test-time flags, by their keys in `settings`.
FLAG_NAMES = {"cache_size": "--cache", "dynamic_window": "--dynamic_window",
              "grid_extensions": "--grid_extensions"}


def settings(cache_size: int, dynamic_window: int, grid_extensions: int) -> dict:
  """What a row's results depend on besides its checkpoint: the cache size, the window of
  dynamic evaluation, every method's grid (as JSON reads them back) and the steps its search
  may take past the grid's edges (`grid_extensions`, saved only when not 0: results saved
  before the searches were extended are those of the grid alone) and the training batches of
  the RMS rule's MS_g (`stat_batches`, `dynamic_eval.STAT_BATCHES`: a progress file made with
  another is not resumed; results saved before it was recorded still match, `_same_settings`)."""
  grids = {"cache": {"theta": list(cache.THETAS), "lambda": list(cache.LAMBDAS)},
           **{f"dynamic_{rule}": {axis: list(values) for axis, values in grid.items()}
              for rule, grid in dynamic_eval.GRIDS.items()}}
  return {"cache_size": cache_size, "dynamic_window": dynamic_window, "grids": grids,
          **({"grid_extensions": grid_extensions} if grid_extensions else {}),
          "stat_batches": dynamic_eval.STAT_BATCHES}


class PartialResults(dict):
  """What a row's evaluation has made so far ({"cache": its result, `dynamic_eval.pass_key`:
  a pass's perplexities}), written to `path` (PROGRESS_FILE) after every entry together with
  what it was made with (`settings` and the checkpoint's step). A file made with anything
  else is not read (`would_resume`): the row starts afresh."""

  def __init__(self, path: epath.Path, made_with: dict):
    saved_with, entries = self.read(path)
    super().__init__(entries if self.would_resume(saved_with, made_with) else {})
    self.path, self.made_with = path, made_with

  @staticmethod
  def would_resume(saved_with: Optional[dict], made_with: dict) -> bool:
    """Whether a file made with `saved_with` (None: no file) is read by an evaluation made
    with `made_with`: made with the same, at any step where `made_with` names none."""
    if saved_with is None:
      return False
    if "step" not in made_with:
      saved_with = {key: value for key, value in saved_with.items() if key != "step"}
    return saved_with == made_with

  @staticmethod
  def read(path: epath.Path) -> tuple[Optional[dict], dict]:
    """What the file at `path` was made with and its entries; (None, {}) with no file."""
    if not path.exists():
      return None, {}
    saved = json_io.read_json(path, errors.UserError,
                               "delete it: the row's evaluation then starts afresh",
                               results=True)
    return saved["made_with"], saved["entries"]

  def __setitem__(self, key: str, value: dict) -> None:
    super().__setitem__(key, value)
    json_io.write_json(self.path, {"made_with": self.made_with, "entries": dict(self)})


def row_results(row_dir: epath.Path, cache_size: int, dynamic_window: int,
                grid_extensions: int) -> dict:
  """The row's test results: `settings` and {"step", "cache", "dynamic_sgd",
  "dynamic_rms"} (`cache.evaluate_split`, `dynamic_eval.evaluate_split`), the
  hyperparameters chosen on valid. What is made goes to the row's `PartialResults` as it is
  made, and a rerun after an interruption takes it from there."""
  model = evaluate.load(row_dir)
  made_with = {**settings(cache_size, dynamic_window, grid_extensions), "step": model.step}
  progress = PartialResults(row_dir / PROGRESS_FILE, made_with)
  if "cache" not in progress:
    progress["cache"] = cache.evaluate_split(model, SCORED_SPLIT, cache_size,
                                             extensions=grid_extensions)
  found = {**made_with, "cache": progress["cache"]}
  for rule in dynamic_eval.METHODS:
    found[f"dynamic_{rule}"] = dynamic_eval.evaluate_split(
        model, SCORED_SPLIT, rule, window=dynamic_window, extensions=grid_extensions,
        passes=progress)
  for method in METHODS:
    logging.info("testtime: %s, %s: %s perplexity %.2f (the model alone %.2f)", row_dir.name,
                 method, SCORED_SPLIT, found[method]["perplexity"],
                 found[method]["model_perplexity"])
  return found


def _read_row_file(row_dir: epath.Path) -> Optional[dict]:
  """The row's saved results (ROW_FILE), None without them."""
  path = row_dir / ROW_FILE
  if not path.exists():
    return None
  return json_io.read_json(path, errors.UserError, "delete it to evaluate the row again",
                           results=True)


def saved_results(row_dir: epath.Path, cache_size: int, dynamic_window: int,
                  grid_extensions: int) -> Optional[dict]:
  """The row's saved results when made with these settings (`settings`) from the checkpoint
  the row has now (when it has checkpoints: a committed page's rows keep none), else None."""
  saved = _read_row_file(row_dir)
  return (saved if saved is not None and _of_evaluated_step(saved, row_dir)
          and _same_settings(saved, cache_size, dynamic_window, grid_extensions) else None)


def _flags_text(values: dict) -> str:
  """`values` ({key of FLAG_NAMES: value}) as the command line gives them."""
  return " ".join(f"{flag}={values[key]}" for key, flag in FLAG_NAMES.items())


def check_flags(row_dirs: Sequence[epath.Path], cache_size: int, dynamic_window: int,
                grid_extensions: int) -> None:
  """UserError when a row keeps results (ROW_FILE) or progress (PROGRESS_FILE) made with
  other test-time flags (FLAG_NAMES) from the checkpoint it evaluates now: evaluating with
  these would replace hours of evaluation, and the page would list the rows it leaves as not
  evaluated. Files of another checkpoint are made again whatever the flags, and pass. A saved
  result without `grid_extensions` was made with none (`settings`)."""
  wanted = {"cache_size": cache_size, "dynamic_window": dynamic_window,
            "grid_extensions": grid_extensions}
  for row_dir in row_dirs:
    for path, made_with in ((row_dir / ROW_FILE, _read_row_file(row_dir)),
                            (row_dir / PROGRESS_FILE, PartialResults.read(
                                row_dir / PROGRESS_FILE)[0])):
      if not made_with or not _of_evaluated_step(made_with, row_dir):
        continue
      found = {key: made_with.get(key, 0) for key in FLAG_NAMES}
      if found != wanted:
        raise errors.UserError(
            f"{path} was made with {_flags_text(found)}, not {_flags_text(wanted)}: give "
            "those flags to go on with this page, or delete the file to evaluate the row "
            "with these")


def _of_evaluated_step(saved: dict, row_dir: epath.Path) -> bool:
  """Whether `saved` (a row's results, or its progress file's "made_with") was made from the
  checkpoint the row evaluates now; true when the row has no checkpoints."""
  step = checkpoints.evaluated_step(row_dir)
  return step is None or saved.get("step") == step


def _same_settings(saved: dict, cache_size: int, dynamic_window: int,
                   grid_extensions: int) -> bool:
  """Whether `saved` (a row's results, or its progress file's "made_with") was made with
  these settings (`settings`)."""
  wanted = settings(cache_size, dynamic_window, grid_extensions)
  return all(saved.get(key) == wanted.get(key)
             for key in ("cache_size", "dynamic_window", "grids", "grid_extensions"))


def in_progress(row_dir: epath.Path, cache_size: int, dynamic_window: int,
                grid_extensions: int) -> Optional[dict]:
  """What the row's progress file holds when its evaluation would go on from it
  (`PartialResults.would_resume`: made with these settings and, where the row has
  checkpoints, its evaluated step): {**its "made_with", "cache": the cache's result (once
  made), "passes": the passes of dynamic evaluation made}, else None."""
  made_with, entries = PartialResults.read(row_dir / PROGRESS_FILE)
  if not (PartialResults.would_resume(made_with,
                                      settings(cache_size, dynamic_window, grid_extensions))
          and _of_evaluated_step(made_with, row_dir)):
    return None
  return {**made_with, **({"cache": entries["cache"]} if "cache" in entries else {}),
          "passes": sum(key != "cache" for key in entries)}


def head_cache(row_dir: epath.Path) -> Optional[dict]:
  """The row's cache over h'_t (HEAD_CACHE_FILE) without its grid, with the valid
  perplexities of its chosen point under each rule (keys "valid_" + a key of RULES, by
  `valid_perplexity`); None when the row has none."""
  path = row_dir / HEAD_CACHE_FILE
  if not path.exists():
    return None
  found = json_io.read_json(path, errors.UserError,
                            f"make it again with {HEAD_CACHE_COMMAND} --workdir={row_dir} "
                            f"> {path}, or delete it", results=True)
  if found.get("method") != "cache" or found.get("cache_states") != "head":
    raise errors.UserError(f"{path} is not a cache over the output layer's h'_t: make it with "
                           f"{HEAD_CACHE_COMMAND}")
  return {**{key: value for key, value in found.items() if key != "grid"},
          **{f"valid_{key}": valid_perplexity(found, key) for key in RULES}}


def valid_perplexity(result: dict, key: str) -> Optional[float]:
  """A method's valid perplexity (`key`'s rule) at its chosen point of the grid."""
  if not result["grid"]:
    return None
  return min(result["grid"], key=lambda point: point["perplexity"])[key]

