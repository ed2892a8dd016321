"""The test-time page of a table (`--mode=testtime`): the neural cache and dynamic evaluation of
each finished row, chosen on valid, scored on test; each row's results in `<row>/testtime.json`
(a row stopped part-way goes on from `testtime_progress.json`), the page in `testtime.json`
and `testtime.md` with published results beside them (docs/testtime.md)."""

import datetime
import math
from typing import NamedTuple, Optional, Sequence

from absl import logging
from etils import epath

from attnlm_jax.common import errors
from attnlm_jax.common import json_io
from attnlm_jax.data import locations
from attnlm_jax.evaluation import evaluate
from attnlm_jax.experiments import markdown
from attnlm_jax.experiments import row_status
from attnlm_jax.experiments import runner
from attnlm_jax.experiments import tables
from attnlm_jax.testtime import cache
from attnlm_jax.testtime import dynamic_eval
from attnlm_jax.testtime import grid_search
from attnlm_jax.training import checkpoints

CACHE_SIZE = 2000        # The cache size of a page unless --cache gives one.
PAGE_JSON = "testtime.json"
PAGE_MD = "testtime.md"
ROW_FILE = "testtime.json"
PROGRESS_FILE = "testtime_progress.json"
HEAD_CACHE_FILE = "cache_head.json"
HEAD_CACHE_COMMAND = "--mode=evaluate --split=test --cache=SIZE --cache_states=head"
METHODS = ("cache", "dynamic_sgd", "dynamic_rms")
# The cap on the training batches that gave the RMS rule's MS_g until 2026-11-28 (results made
# then do not record theirs; dynamic_eval.STAT_BATCHES).
EARLIER_STAT_BATCHES = 200
# The two perplexity rules of the page (`losses.py`), by their keys in the results.
RULES = {"perplexity": "every token predicted",
         "perplexity_paper_convention": "the released code's rule: a sentence's first word "
                                        "not predicted but counted"}
SPLIT = "test"


class Anchor(NamedTuple):
  """A published test perplexity of another model alone, with the neural cache and with
  dynamic evaluation (None: not reported), as printed."""
  source: str
  model: str
  corpus: str
  model_perplexity: float
  cache: Optional[float]
  dynamic: Optional[float]
  settings: str


# Published results of the test-time methods, set beside every page's rows (each test split
# read as one stream; the cache and its settings as each source reports them).
ANCHORS = (
    Anchor("Grave, Joulin & Usunier 2017", "their LSTM", "Penn Treebank", 82.3, 72.1, None,
           "-"),
    Anchor("GluonNLP, cache_language_model", "standard_lstm_lm_650 (2 x 650, tied)",
           "WikiText-2", 93.90, 67.31, None, "2,000 words, theta 0.662, lambda 0.1279"),
    Anchor("Merity, Keskar & Socher 2018; Krause et al. 2018", "AWD-LSTM", "Penn Treebank",
           57.3, 52.8, 51.1, "-"),
)


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
    progress["cache"] = cache.evaluate_split(model, SPLIT, cache_size,
                                             extensions=grid_extensions)
  found = {**made_with, "cache": progress["cache"]}
  for rule in dynamic_eval.METHODS:
    found[f"dynamic_{rule}"] = dynamic_eval.evaluate_split(
        model, SPLIT, rule, window=dynamic_window, extensions=grid_extensions,
        passes=progress)
  for method in METHODS:
    logging.info("testtime: %s, %s: %s perplexity %.2f (the model alone %.2f)", row_dir.name,
                 method, SPLIT, found[method]["perplexity"], found[method]["model_perplexity"])
  return found


def _read_row_file(row_dir: epath.Path) -> Optional[dict]:
  """The row's saved results (ROW_FILE), None without them."""
  path = row_dir / ROW_FILE
  if not path.exists():
    return None
  return json_io.read_json(path, errors.UserError, "delete it to evaluate the row again",
                           results=True)


def _saved(row_dir: epath.Path, cache_size: int, dynamic_window: int,
           grid_extensions: int) -> Optional[dict]:
  """The row's saved results when made with these settings (`settings`) from the checkpoint
  the row has now (when it has checkpoints: a committed page's rows keep none), else None."""
  saved = _read_row_file(row_dir)
  return (saved if saved is not None and _of_evaluated_step(saved, row_dir)
          and _same_settings(saved, cache_size, dynamic_window, grid_extensions) else None)


# The command line's test-time flags, by their keys in `settings`.
FLAG_NAMES = {"cache_size": "--cache", "dynamic_window": "--dynamic_window",
         "grid_extensions": "--grid_extensions"}


def _flags_text(values: dict) -> str:
  """`values` ({key of FLAG_NAMES: value}) as the command line gives them."""
  return " ".join(f"{flag}={values[key]}" for key, flag in FLAG_NAMES.items())


def check_flags(row_dirs: Sequence[epath.Path], cache_size: int, dynamic_window: int,
                grid_extensions: int) -> None:
  """UserError when a row keeps results (ROW_FILE) or progress (PROGRESS_FILE) made with
  other test-time flags (FLAG_NAMES): evaluating with these would replace hours of
  evaluation, and the page would list the rows it leaves as not evaluated. A saved result
  without `grid_extensions` was made with none (`settings`)."""
  wanted = {"cache_size": cache_size, "dynamic_window": dynamic_window,
            "grid_extensions": grid_extensions}
  for row_dir in row_dirs:
    for path, made_with in ((row_dir / ROW_FILE, _read_row_file(row_dir)),
                            (row_dir / PROGRESS_FILE, PartialResults.read(
                                row_dir / PROGRESS_FILE)[0])):
      found = made_with and {key: made_with.get(key, 0) for key in FLAG_NAMES}
      if found and found != wanted:
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


def _in_progress(row_dir: epath.Path, cache_size: int, dynamic_window: int,
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


def _head_cache(row_dir: epath.Path) -> Optional[dict]:
  """The row's cache over h'_t (HEAD_CACHE_FILE) without its grid, with the valid
  perplexities of its chosen point (`valid_perplexity`, `valid_perplexity_paper_convention`);
  None when the row has none."""
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
          **{f"valid_{key}": _valid(found, key) for key in RULES}}


def _valid(result: dict, key: str) -> Optional[float]:
  """A method's valid perplexity (`key`'s rule) at its chosen point of the grid."""
  if not result["grid"]:
    return None
  return min(result["grid"], key=lambda point: point["perplexity"])[key]


def _cells(record: dict, key: str) -> list[str]:
  """A page line under one rule (`key`): the model's and each method's valid / test."""
  found = _results_so_far(record)
  return [record["name"],
          " / ".join(markdown.perplexity_cell(record, f"{split}_{key}")
                     for split in ("valid", "test")),
          *(markdown.valid_test_cell(_valid(found[method], key), found[method][key])
            if method in found else _missing_cell(record) for method in METHODS)]


def _results_so_far(record: dict) -> dict:
  """A page row's results: whole, or what its evaluation has made so far, or none ({})."""
  return record["results"] or record.get("in_progress") or {}


def _missing_cell(record: dict) -> str:
  """A page cell for a method whose result the row does not have (yet)."""
  if record.get("every_token_predicted") is False:
    return "not applicable"
  if "in_progress" in record:
    passes = record["in_progress"]["passes"]
    return f"evaluating ({passes} pass{'es' if passes != 1 else ''} made)"
  return "not evaluated" if record["status"] == row_status.FINISHED else record["status"]


def _hyperparameters(record: dict) -> list[str]:
  """A line of the hyperparameter table."""
  found = _results_so_far(record)
  cached = found.get("cache")
  dynamic = [found.get(f"dynamic_{rule}") for rule in dynamic_eval.METHODS]
  return [record["name"],
          f"{cached['cache_theta']:g}, {cached['cache_lambda']:g}" if cached else "-",
          *("-" if d is None else
            f"{d['learning_rate']:g}, {d['decay']:g} ({_count(d['window'], d['window_unit'])})"
            if _converged(d) else "none: every point diverged" for d in dynamic)]


def _converged(result: dict) -> bool:
  """Whether a method's chosen grid point has a finite valid perplexity (with no grid, the
  hyperparameters were given and nothing was chosen)."""
  valid = _valid(result, "perplexity")
  return valid is None or math.isfinite(valid)


# Each method's name on the page, and its chosen value of each grid axis in its results.
METHOD_NAMES = {"cache": "cache", "dynamic_sgd": "SGD", "dynamic_rms": "RMS"}
AXIS_KEYS = {"theta": "cache_theta", "lambda": "cache_lambda"}


def edge_choices(results_of_row: dict) -> list[str]:
  """The hyperparameters chosen at an edge of the values searched (the grid and the steps
  past its edges), where the best point may lie beyond them: "SGD learning rate 1, the
  largest of 0.1, 0.3, 1". A smallest value is an edge only when above zero (no decay, no
  cache weight and theta 0 are bounds)."""
  edges = []
  for method, name in METHOD_NAMES.items():
    if method not in results_of_row:  # Not made yet.
      continue
    for axis in results_of_row["grids"][method]:
      grid = sorted({point[axis] for point in results_of_row[method]["grid"]})
      chosen = results_of_row[method][AXIS_KEYS.get(axis, axis)]
      if len(grid) < 2 or min(grid) < chosen < max(grid):
        continue
      if chosen == max(grid) or min(grid) > 0:
        side = "largest" if chosen == max(grid) else "smallest"
        edges.append(f"{name} {axis.replace('_', ' ')} {chosen:g}, the {side} of "
                     f"{', '.join(f'{value:g}' for value in grid)}")
  return edges


def _edge_notes(rows: Sequence[dict]) -> list[str]:
  """testtime.md's notes on the rows' choices at the edges of their grids."""
  found = {r["name"]: _results_so_far(r) for r in rows}
  notes = [f"- `{name}`: {'; '.join(choices)}." for name, results_of_row in found.items()
           if (choices := edge_choices(results_of_row))]
  return ["Chosen at an edge of the values searched (the best point may lie beyond it):", "",
          *notes, ""] if notes else []


def _count(number: int, unit: str) -> str:
  """'35 tokens', '1 sentence': `number` of a dynamic_eval.WINDOW_UNITS unit."""
  return f"{number} {unit if number != 1 else dynamic_eval.WINDOW_UNITS[unit]}"


def _head_cache_lines(rows: Sequence[dict]) -> list[str]:
  """testtime.md's table of the rows' caches over h'_t (none: no lines)."""
  lines = [[r["name"], f"{head['cache_size']:,}",
            *(markdown.valid_test_cell(head[f"valid_{key}"], head[key]) for key in RULES),
            f"{head['cache_theta']:g}, {head['cache_lambda']:g}"]
           for r in rows for head in [r.get("cache_head")] if head]
  if not lines:
    return []
  return ["The cache over the output layer's h'_t, the softmax's input, instead of the last "
          "LSTM layer's h_t (each row's `cache_head.json`, made by `--mode=evaluate "
          "--split=test --cache=SIZE --cache_states=head`; docs/testtime.md), valid / test:",
          "", markdown.markdown_table(("row", "cache size", "every token predicted",
                                      "the released code's rule", "theta, lambda"), lines), ""]


def _rms_statistics_lines(rows: Sequence[dict]) -> list[str]:
  """testtime.md's line on the training batches each evaluated row's RMS rule took MS_g from
  (results made before they recorded it capped them at EARLIER_STAT_BATCHES)."""
  counts = [(r["name"], r["results"]["dynamic_rms"].get("gradient_batches"))
            for r in rows if r.get("results")]
  made = [f"`{name}` {count:,}" for name, count in counts if count is not None]
  capped = [f"`{name}`" for name, count in counts if count is None]
  parts = ([", ".join(made)] if made else []) + (
      [f"at most {EARLIER_STAT_BATCHES} for {', '.join(capped)} (evaluated before MS_g took "
       "every batch)"] if capped else [])
  return ([f"The training batches the RMS rule's MS_g averages over (docs/testtime.md): "
           f"{'; '.join(parts)}.", ""] if parts else [])


def format_markdown(page: dict) -> str:
  """testtime.md of a testtime.json dict."""
  methods = (f"cache ({page['cache_size']:,})", "dynamic eval., SGD", "dynamic eval., RMS")
  tables = []
  for key, rule in RULES.items():
    tables += [f"Perplexity, valid / test, {rule}:", "",
               markdown.markdown_table(("row", "model", *methods),
                                      [_cells(r, key) for r in page["rows"]]), ""]
  anchors = [[a["source"], a["model"], a["corpus"],
              *(f"{a[key]:g}" if a[key] is not None else "-"
                for key in ("model_perplexity", "cache", "dynamic")), a["settings"]]
             for a in page.get("anchors", ())]  # Absent from pages saved before them.
  return "\n".join([
      f"# Test-time methods on table `{page['table']}`: {page['title']}", "",
      f"Written by `{page['command']}` ({page['date']}).", "", *tables,
      "Hyperparameters chosen on valid (`docs/testtime.md` gives the grids):", "",
      markdown.markdown_table(("row", "cache theta, lambda", "SGD learning rate, decay "
                              "(window)", "RMS learning rate, decay (window)"),
                             [_hyperparameters(r) for r in page["rows"]]), "",
      *_edge_notes(page["rows"]),
      *_rms_statistics_lines(page["rows"]),
      *_head_cache_lines(page["rows"]),
      *(["Published anchors, test perplexity (`ANCHORS`; each split read as one stream, "
         "dynamic evaluation as Krause et al. 2018 report it for AWD-LSTM):", "",
         markdown.markdown_table(("source", "model", "corpus", "model alone", "cache",
                                 "dynamic eval.", "cache settings"), anchors), ""]
        if anchors else []),
      "`model`: the row's own evaluation (`results.md`). A method's valid number is that of "
      "its chosen grid point, its test number that of the same hyperparameters on test; "
      "`diverged`: not finite (the adapted model's log-probabilities overflowed); "
      "`evaluating`: the row's searches stopped part-way or still running in another "
      "process, its passes of dynamic evaluation over valid or test made so far counted "
      "(each method's result is shown once made); `not applicable`: a row trained without a "
      "start symbol (the released code's rows) never predicts a sentence's first word (so its "
      "own perplexity reads n/a under the standard rule), and the methods need every word "
      "predicted. "
      "Dynamic evaluation reads a stream-protocol split as one stream (batch 1); its "
      "`model_perplexity` in testtime.json is the trained model over those same windows.",
      ""])


def run(table: str, workdir, rows: Sequence[str] = (), cache_size: int = CACHE_SIZE,
        dynamic_window: int = 1, grid_extensions: int = grid_search.EXTENSIONS) -> dict:
  """`--mode=testtime`: evaluates the table's finished training rows with the test-time
  methods and writes the page.

  Args:
    table: a name of `tables.TABLES`.
    workdir: the table's directory (its rows in workdir/<row>).
    rows: the rows to evaluate (default all); the page lists every training row, with the
      results saved earlier for the rows not evaluated now.
    cache_size: the neural cache's size.
    dynamic_window: sentences (or document spans) per window of dynamic evaluation.
    grid_extensions: steps each search may take past each edge of its grid (0: the grid
      alone; `grid_search`).

  Returns:
    {"table", "workdir", "files", "evaluated" (the rows evaluated now), "rows": {name:
     status}}.
  """
  cache.check(cache_size, None, None)
  rows = tables.row_names(rows)
  selected = {row.name for row in tables.select_rows(table, rows)}
  workdir = epath.Path(str(workdir))
  runner.require_workdir(table, workdir, "--mode=testtime")
  training_rows = [row for row in tables.get_table(table).rows if row.kind == tables.TRAIN]
  check_flags([row.directory(workdir) for row in training_rows], cache_size, dynamic_window,
              grid_extensions)
  records, evaluated = [], []
  for row in training_rows:
    state = row_status.read(row, workdir)
    row_dir = row.directory(workdir)
    if not runner.row_config(row, workdir).data.get("start_symbol", True):
      records.append({"name": row.name, **{k: v for k, v in state.items() if k != "valid_curve"},
                      "results": None, "every_token_predicted": False})
      continue
    found = _saved(row_dir, cache_size, dynamic_window, grid_extensions)
    if found is None and row.name in selected and state["status"] == row_status.FINISHED:
      logging.info("testtime: row %s", row.name)
      found = row_results(row_dir, cache_size, dynamic_window, grid_extensions)
      json_io.write_json(row_dir / ROW_FILE, found)
      (row_dir / PROGRESS_FILE).unlink()
      evaluated.append(row.name)
    made = None if found else _in_progress(row_dir, cache_size, dynamic_window,
                                           grid_extensions)
    head = _head_cache(row_dir)
    records.append({"name": row.name, **{k: v for k, v in state.items() if k != "valid_curve"},
                    "results": found, **({"in_progress": made} if made else {}),
                    **({"cache_head": head} if head else {})})
  command = " ".join(["python -m attnlm_jax.main --mode=testtime", f"--table={table}",
                      f"--workdir={locations.as_typed(workdir)}",
                      *([f"--rows={','.join(rows)}"] if rows else []),
                      f"--cache={cache_size}", f"--dynamic_window={dynamic_window}",
                      f"--grid_extensions={grid_extensions}"])
  page = {"table": table, "title": tables.get_table(table).title,
          "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
          "command": command, "cache_size": cache_size, "dynamic_window": dynamic_window,
          "grid_extensions": grid_extensions, "rows": records,
          "anchors": [anchor._asdict() for anchor in ANCHORS]}
  json_io.write_json(workdir / PAGE_JSON, page)
  (workdir / PAGE_MD).write_text(format_markdown(page))
  return {"table": table, "workdir": str(workdir),
          "files": [str(workdir / PAGE_JSON), str(workdir / PAGE_MD)],
          "evaluated": evaluated, "rows": {r["name"]: r["status"] for r in records}}
