"""The test-time page of a table (`--mode=testtime`): the neural cache and dynamic evaluation of
each finished row, chosen on valid, scored on test; each row's results in `<row>/testtime.json`
(a row stopped part-way goes on from `testtime_progress.json`: `testtime_rows`), the page in
`testtime.json` and `testtime.md` with published results beside them (docs/testtime.md)."""

import datetime
import math
from typing import NamedTuple, Optional, Sequence

from absl import logging
from etils import epath

from attnlm_jax.common import json_io
from attnlm_jax.data import locations
from attnlm_jax.experiments import markdown
from attnlm_jax.experiments import row_status
from attnlm_jax.experiments import runner
from attnlm_jax.experiments import tables
from attnlm_jax.experiments import testtime_rows
from attnlm_jax.testtime import cache
from attnlm_jax.testtime import dynamic_eval
from attnlm_jax.testtime import grid_search

CACHE_SIZE = 2000        # The cache size of a page unless --cache gives one.
PAGE_JSON = "testtime.json"
PAGE_MD = "testtime.md"
# The cap on the training batches that gave the RMS rule's MS_g until 2026-11-28 (results made
# then do not record theirs; dynamic_eval.STAT_BATCHES).
EARLIER_STAT_BATCHES = 200


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


def _cells(record: dict, key: str) -> list[str]:
  """A page line under one rule (`key`): the model's and each method's valid / test."""
  found = _results_so_far(record)
  return [record["name"],
          " / ".join(markdown.perplexity_cell(record, f"{split}_{key}")
                     for split in ("valid", "test")),
          *(markdown.valid_test_cell(testtime_rows.valid_perplexity(found[method], key),
                                     found[method][key])
            if method in found else _missing_cell(record) for method in testtime_rows.METHODS)]


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
  valid = testtime_rows.valid_perplexity(result, "perplexity")
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
            *(markdown.valid_test_cell(head[f"valid_{key}"], head[key])
              for key in testtime_rows.RULES),
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
  for key, rule in testtime_rows.RULES.items():
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

  Raises:
    UserError: a row keeps results or progress made with other `cache_size`,
      `dynamic_window` or `grid_extensions` (`testtime_rows.check_flags`).
  """
  cache.check(cache_size, None, None)
  rows = tables.row_names(rows)
  selected = {row.name for row in tables.select_rows(table, rows)}
  workdir = epath.Path(str(workdir))
  runner.require_workdir(table, workdir, "--mode=testtime")
  training_rows = [row for row in tables.get_table(table).rows if row.kind == tables.TRAIN]
  testtime_rows.check_flags([row.directory(workdir) for row in training_rows], cache_size,
                            dynamic_window, grid_extensions)
  records, evaluated = [], []
  for row in training_rows:
    state = row_status.read(row, workdir)
    row_dir = row.directory(workdir)
    if not runner.row_config(row, workdir).data.get("start_symbol", True):
      records.append({"name": row.name, **{k: v for k, v in state.items() if k != "valid_curve"},
                      "results": None, "every_token_predicted": False})
      continue
    found = testtime_rows.saved_results(row_dir, cache_size, dynamic_window, grid_extensions)
    if found is None and row.name in selected and state["status"] == row_status.FINISHED:
      logging.info("testtime: row %s", row.name)
      found = testtime_rows.row_results(row_dir, cache_size, dynamic_window, grid_extensions)
      json_io.write_json(row_dir / testtime_rows.ROW_FILE, found)
      (row_dir / testtime_rows.PROGRESS_FILE).unlink()
      evaluated.append(row.name)
    made = None if found else testtime_rows.in_progress(row_dir, cache_size, dynamic_window,
                                                        grid_extensions)
    head = testtime_rows.head_cache(row_dir)
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
