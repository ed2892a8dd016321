"""The table runner: trains the rows of a published table and sets them beside the paper.

The tables and their rows are data (`tables.TABLES`). `run(table, workdir)`
(`--mode=reproduce`) trains every selected row not yet finished in `workdir/<row>` (a row's
dependencies first; `train.train_and_evaluate` resumes an interrupted run from its latest
checkpoint), refuses a row directory made with another config, and after each row it runs
writes into `workdir`:
- `results.json`: every row's config, command, status, parameter count, epochs, final
  perplexities under both rules, the printed numbers and the difference to them, the
  validation perplexity of every epoch, and where and with what code (`code_version`) it
  trained; the table and the command that reproduces it;
- `results.md`: the same as one Markdown table;
- `curves.png`: validation perplexity per epoch, one line per trained row.
A row that has started and not finished is shown running, with its epochs done, the best
validation perplexity so far, the last epoch's training time and the epoch after which early
stopping ends it unless it improves before then. When SIGTERM or SIGINT stops the row in
training (`preemption.Stopped`, after its checkpoint is saved), the results files are
written with that row running and the exception goes on to the caller; rerunning the same
command resumes the row. A row that diverges (`train.TrainingDiverged`) is shown so, with
the step and the reason, and the exception goes on the same way. With `dry_run` it trains
nothing and prints the plan: each row's command, epochs, training tokens, parameter count and
status in `workdir`. With `pages_only` it trains nothing and rewrites the three files from
what `workdir` holds (rows still training shown running): the pages of a table whose runs go
on elsewhere.
"""

import dataclasses
import datetime
import functools
import json
import os
import pathlib
from typing import Any, Mapping, Optional, Sequence

from absl import logging
from etils import epath
import jax
import ml_collections

from attnlm_jax import analysis
from attnlm_jax import checkpoints
from attnlm_jax import data as data_lib
from attnlm_jax import ensemble
from attnlm_jax import errors
from attnlm_jax import logging_utils
from attnlm_jax import models
from attnlm_jax import preemption
from attnlm_jax import results
from attnlm_jax import table_page
from attnlm_jax import tables
from attnlm_jax import tagger
from attnlm_jax import train

RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"
CURVES_PNG = "curves.png"
INTERPOLATION_FILE = "interpolation.json"  # An interpolation row's result, in its directory.
TAGGER_FILE = "tagger.json"                # Written by `tagger.save`.
SPLITS = ("valid", "test")

CORPUS_NOT_FOUND = "corpus not found"

# Config keys that may differ between a row and its saved config.json: where the files are,
# and how often the run logs and saves.
IGNORED_KEYS = ("data.data_dir", "data.cache_dir", "data.tagger_dir", "train.log_every_steps",
                "train.save_every_steps")
# Sizes a config file leaves at 0 for training to take from the data and the tagger.
FILLED_KEYS = ("model.vocab_size", "model.num_tags")
_ABSENT = "absent"  # How a config key missing on one side shows in a difference.


class ReproduceError(errors.UserError):
  """A row directory that holds another config's run."""


# --------------------------------------------------------------------------- rows


def _overrides(row: tables.Row, workdir: epath.Path) -> dict:
  """The row's overrides with the directories of the rows it reads filled in."""
  return {**row.overrides, **{key: str(workdir / name) for key, name in row.row_dirs.items()}}


def row_config(row: tables.Row, workdir: epath.Path) -> Optional[ml_collections.ConfigDict]:
  """The config a training or tagger row runs with (None for an interpolation)."""
  if row.kind == tables.INTERPOLATE:
    return None
  return analysis.load_config(tables.configs_dir() / row.config, _overrides(row, workdir))


def _flag(value) -> str:
  """A value as a command-line flag takes it."""
  return str(value).lower() if isinstance(value, bool) else str(value)


def as_typed(path: epath.Path) -> epath.Path:
  """`path` relative to the current directory when it lies inside it (as a user types it
  from the repository root), else as it is: the form the printed commands take."""
  local = pathlib.Path(os.fspath(path))
  if local.is_absolute() and local.is_relative_to(pathlib.Path.cwd()):
    return epath.Path(local.relative_to(pathlib.Path.cwd()))
  return path


def row_command(row: tables.Row, workdir: epath.Path) -> str:
  """The command that runs this row alone."""
  workdir = as_typed(workdir)
  if row.kind == tables.INTERPOLATE:
    return ("python -m attnlm_jax.main --mode=evaluate --split=test "
            f"--workdirs={','.join(str(workdir / m) for m in row.members)} "
            f"--weights={','.join(map(str, row.weights))}")
  mode = ["--mode=train_tagger"] if row.kind == tables.TAGGER else []
  flags = [f"--config.{key}={_flag(value)}" for key, value in _overrides(row, workdir).items()]
  return " ".join(["python -m attnlm_jax.main", *mode, f"--config=configs/{row.config}",
                   *flags, f"--workdir={workdir / row.name}"])


def _config_text(row: tables.Row) -> str:
  """The row's model as results.md shows it: config file, argument and overrides."""
  if row.kind == tables.INTERPOLATE:
    return (f"interpolation of {' and '.join(row.members)}, weights "
            f"{', '.join(map(str, row.weights))}")
  overrides = [f"{key}={_flag(value)}" for key, value in row.overrides.items()]
  overrides += [f"{key}=<{name}>" for key, name in row.row_dirs.items()]
  return " ".join([f"configs/{row.config}", *overrides])


# --------------------------------------------------------------------------- configs


def _flatten(tree: Mapping, prefix: str = "") -> dict:
  """{"model.score": ...} of a nested JSON dict."""
  flat = {}
  for key, value in tree.items():
    if isinstance(value, Mapping):
      flat.update(_flatten(value, f"{prefix}{key}."))
    else:
      flat[f"{prefix}{key}"] = value
  return flat


def _as_json(config: ml_collections.ConfigDict) -> dict:
  """A ConfigDict as plain JSON values (tuples become lists, references resolved)."""
  return json.loads(config.to_json_best_effort())


def config_differences(expected: Mapping, saved: Mapping) -> dict[str, tuple[Any, Any]]:
  """The dotted keys whose values differ between a row's config and a saved one (both as
  JSON dicts).

  Paths and logging/saving cadence (IGNORED_KEYS) are left out, and so are the sizes training
  fills in (FILLED_KEYS) when the row's config leaves them to it (0).

  Returns:
    {key: (saved value, expected value)}, "absent" for a key one of them lacks.
  """
  want, have = _flatten(expected), _flatten(saved)
  ignored = {*IGNORED_KEYS, *(key for key in FILLED_KEYS if not want.get(key))}
  pairs = {key: (have.get(key, _ABSENT), want.get(key, _ABSENT))
           for key in sorted(want.keys() | have.keys()) if key not in ignored}
  return {key: pair for key, pair in pairs.items() if pair[0] != pair[1]}


def _saved_config(row: tables.Row, row_dir: epath.Path) -> Optional[dict]:
  """The part of a row directory's saved config that its config must match, or None."""
  if row.kind == tables.TAGGER and (row_dir / TAGGER_FILE).exists():
    return {"model": json.loads((row_dir / TAGGER_FILE).read_text())["config"]}
  if row.kind == tables.TRAIN and (row_dir / checkpoints.CONFIG_FILE).exists():
    return _as_json(checkpoints.read_config(row_dir))
  return None


def _differences(row: tables.Row, row_dir: epath.Path, config) -> list[str]:
  """How the config saved in `row_dir` differs from the row's, one text per key."""
  saved = _saved_config(row, row_dir)
  if saved is None:
    return []
  expected = ({"model": _as_json(config.model)} if row.kind == tables.TAGGER
              else _as_json(config))
  return [f"{key} is {there} there, {here} here"
          for key, (there, here) in config_differences(expected, saved).items()]


def check_workdir(name: str, workdir: epath.Path, configs: Mapping[str, Any]) -> None:
  """Refuses a row directory of table `name` holding a run of another config."""
  for row in tables.get_table(name).rows:
    differences = _differences(row, workdir / row.name, configs[row.name])
    if differences:
      raise ReproduceError(
          f"{workdir / row.name} holds a run of another config than row {row.name} of table "
          f"{name} ({'; '.join(differences)}): use another --workdir or remove "
          f"{workdir / row.name}")


# --------------------------------------------------------------------------- state of rows


def _training_state(row_dir: epath.Path) -> dict:
  """Status, parameter count, epochs and final perplexities of a training row; a running
  row's best epoch so far, with its "best_valid_perplexity" and "last_epoch_seconds"."""
  if not (row_dir / logging_utils.METRICS_FILE).exists():
    return {"status": table_page.NOT_STARTED}
  run = results.read_run(row_dir)
  state = {"status": table_page.FINISHED, "params": run["params"], "best_epoch": run["best_epoch"],
           "epochs_run": run["epochs_run"], "valid_curve": run["valid_curve"],
           "ran_on": run["ran_on"], "code_versions": run["code_versions"],
           "epoch_seconds": run["epoch_seconds"],
           "fastest_epoch_seconds": run["fastest_epoch_seconds"],
           **{key: run[key] for key in results.RUN_KEYS}}
  if run["diverged"]:
    state.update(status=f"{table_page.DIVERGED}: step {run['diverged']['step']}",
                 diverged=run["diverged"])
  elif not run["finished"]:
    state.update(status=f"{table_page.RUNNING}: epoch {run['epochs_run']} of {run['num_epochs']}",
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
  """Status, parameter count and test accuracy of a tagger row."""
  if not (row_dir / TAGGER_FILE).exists():
    return {"status": table_page.NOT_STARTED}
  metrics = json.loads((row_dir / TAGGER_FILE).read_text())["metrics"]
  return {"status": table_page.FINISHED, "params": metrics["num_params"],
          "test_accuracy": metrics["test_accuracy"]}


def _interpolation_state(row_dir: epath.Path) -> dict:
  """Status and perplexities of an interpolation row."""
  if not (row_dir / INTERPOLATION_FILE).exists():
    return {"status": table_page.NOT_STARTED}
  mixture = json.loads((row_dir / INTERPOLATION_FILE).read_text())
  return {"status": table_page.FINISHED, "weights": mixture["test"]["weights"],
          **{f"{split}_{key}": mixture[split][key] for split in SPLITS
             for key in ("perplexity", "perplexity_paper_convention")}}


_STATE_READERS = {tables.TRAIN: _training_state, tables.TAGGER: _tagger_state,
                  tables.INTERPOLATE: _interpolation_state}


def row_state(row: tables.Row, workdir: epath.Path) -> dict:
  """What workdir/<row> holds: {"status": FINISHED, NOT_STARTED, "running: epoch k of n" or
  "diverged: step s" (the statuses of `table_page`), ...}."""
  return _STATE_READERS[row.kind](workdir / row.name)


def row_record(row: tables.Row, workdir: epath.Path, config) -> dict:
  """The row as results.json lists it (None for what does not apply or is not known yet)."""
  record = {"name": row.name, "kind": row.kind,
            "config": f"configs/{row.config}" if row.config else None,
            "overrides": dict(row.overrides), "model": _config_text(row),
            "command": row_command(row, workdir), "status": table_page.NOT_STARTED, "params": None,
            "num_epochs": config.train.num_epochs if config else None,
            "learning_rate": config.train.learning_rate if config else None,
            "bucket": config.data.get("bucket") if config else None, "epochs_run": None,
            "best_epoch": None, **dict.fromkeys(results.RUN_KEYS), "valid_curve": [],
            "ran_on": [], "code_versions": [], "epoch_seconds": {}, "fastest_epoch_seconds": {},
            "paper": None, "differences": None}
  if row.note:
    record["note"] = row.note
  record.update(row_state(row, workdir))
  if row.paper:
    paper = results.paper_result(*row.paper)
    record["paper"] = dataclasses.asdict(paper)
    record["differences"] = results.paper_differences(record, paper)
  return record


# --------------------------------------------------------------------------- results files


def write_results(name: str, workdir: epath.Path, configs: Mapping[str, Any],
                  command: str) -> dict:
  """Writes results.json, results.md and curves.png of table `name` into `workdir`.

  Returns:
    the results.json dict: {"table", "title", "date", "command", "workdir", "rows"}.
  """
  table = tables.get_table(name)
  summary = {"table": name, "title": table.title,
             "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
             "command": command, "workdir": str(as_typed(workdir)),
             "rows": [row_record(row, workdir, configs[row.name]) for row in table.rows]}
  if table.reference:
    summary.update(reference=table.reference, tolerance=table.tolerance,
                   epoch_differences=table_page.epoch_differences(summary["rows"], table.reference))
  workdir.mkdir(parents=True, exist_ok=True)
  (workdir / RESULTS_JSON).write_text(json.dumps(summary, indent=1) + "\n")
  (workdir / RESULTS_MD).write_text(table_page.format_markdown(summary))
  results.plot_valid_curves({r["name"]: r["valid_curve"] for r in summary["rows"]},
                            workdir / CURVES_PNG,
                            f"{name}: validation perplexity per epoch")
  return summary


# --------------------------------------------------------------------------- the plan


def _training_data(data_config: ml_collections.ConfigDict, cache: dict) -> data_lib.LMData:
  """The corpus of a data config (without POS tags), loaded once per config.

  Raises:
    CorpusError: its files are missing.
  """
  data_config = data_config.copy_and_resolve_references()
  if data_config.get("tagger_dir"):
    data_config.tagger_dir = ""
  key = data_config.to_json(sort_keys=True)
  if key not in cache:
    cache[key] = data_lib.load(data_config)
  return cache[key]


def _param_count(config: ml_collections.ConfigDict, vocab_size: int) -> Optional[int]:
  """Trainable parameters of the row's model (None for POS-tag inputs before their tagger)."""
  config = config.copy_and_resolve_references()
  config.model.vocab_size = vocab_size
  try:
    tagger.set_lm_num_tags(config)
  except tagger.TaggerError:
    return None
  shapes = jax.eval_shape(functools.partial(models.init, config=config.model),
                          jax.random.key(0))
  return models.count_params(shapes)


def _tagger_tokens(config: ml_collections.ConfigDict) -> int:
  """Tagged training words of the tagger's corpus per epoch.

  Raises:
    TaggerError: its files are missing.
  """
  sentences = tagger.read_conll(epath.Path(config.data.data_dir) / "train.txt",
                                config.data.drop_punctuation)
  sentences = sentences[:config.data.max_train_sentences or None]
  if config.data.get("treebank_dir"):
    sentences += tagger.read_treebank_pos(config.data.treebank_dir,
                                          config.data.drop_punctuation)
  return sum(len(words) for words, _ in sentences)


def plan_row(row: tables.Row, workdir: epath.Path, config, cache: dict) -> dict:
  """What training the row takes: epochs, tokens, parameters, and its status in workdir."""
  state = row_state(row, workdir)
  differences = _differences(row, workdir / row.name, config) if config else []
  printed = results.paper_result(*row.paper) if row.paper else None
  plan = {"name": row.name, "kind": row.kind, "command": row_command(row, workdir),
          "printed": (f"{results.format_number(printed.valid)} / "
                      f"{results.format_number(printed.test)} ({printed.paper})"
                      if printed else "-"),
          "epochs": None, "tokens_per_epoch": None, "total_tokens": None,
          "params": state.get("params"), "note": "",
          "status": f"config differs: {'; '.join(differences)}" if differences
                    else state["status"]}
  if row.kind == tables.INTERPOLATE:
    plan["note"] = f"no training: mixes {' and '.join(row.members)}"
    return plan
  plan["epochs"] = config.train.num_epochs
  try:
    if row.kind == tables.TAGGER:
      plan["tokens_per_epoch"] = _tagger_tokens(config)
    else:
      data = _training_data(config.data, cache)
      plan["tokens_per_epoch"] = data.train_tokens_per_epoch()
      plan["params"] = _param_count(config, len(data.vocab))
      if plan["params"] is None:
        plan["note"] = "parameters counted once the tagger row is trained"
  except (data_lib.CorpusError, tagger.TaggerError) as e:
    plan["note"] = f"{CORPUS_NOT_FOUND}: {e}"
    return plan
  plan["total_tokens"] = plan["epochs"] * plan["tokens_per_epoch"]
  return plan


def format_plan(name: str, workdir: epath.Path, plan: Sequence[dict]) -> str:
  """The plan as an aligned text table and each row's command."""
  headers = ("row", "kind", "epochs", "tokens/epoch", "total tokens", "params", "status",
             "printed valid / test")
  lines = [(p["name"], p["kind"], table_page.count(p["epochs"]),
            CORPUS_NOT_FOUND if p["note"].startswith(CORPUS_NOT_FOUND)
            else table_page.count(p["tokens_per_epoch"]),
            table_page.count(p["total_tokens"]), table_page.count(p["params"]), p["status"],
            p["printed"])
           for p in plan]
  widths = [max(len(line[i]) for line in [headers, *lines]) for i in range(len(headers))]
  text = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
          for line in [headers, *lines]]
  notes = [f"  {p['name']}: {p['note']}" for p in plan if p["note"]]
  return "\n".join([f"Table {name}: {tables.get_table(name).title}; dry run in {workdir}", "",
                    *text, "(epochs: at most; early stopping may end a row sooner)", "",
                    "Commands:", *(f"  {p['name']}: {p['command']}" for p in plan),
                    *(["", "Notes:", *notes] if notes else []), ""])


# --------------------------------------------------------------------------- running


def _run_row(row: tables.Row, workdir: epath.Path, config) -> None:
  """Trains (or interpolates) one row into workdir/<row>."""
  row_dir = workdir / row.name
  if row.kind == tables.TRAIN:
    train.train_and_evaluate(config, row_dir)
  elif row.kind == tables.TAGGER:
    tagger.train_tagger(config, row_dir)
  else:
    mixture = {split: ensemble.interpolate([workdir / m for m in row.members], split,
                                           weights=list(row.weights)) for split in SPLITS}
    row_dir.mkdir(parents=True, exist_ok=True)
    (row_dir / INTERPOLATION_FILE).write_text(json.dumps(mixture, indent=1) + "\n")


def run(table: str, workdir, rows: Sequence[str] = (), dry_run: bool = False,
        pages_only: bool = False) -> dict:
  """`--mode=reproduce`: trains the table's rows not yet finished and writes its results.

  Args:
    table: a name of `tables.TABLES`.
    workdir: the table's directory (local or gs://); row R trains in workdir/R.
    rows: the rows to run (default all); the rows they need are run too.
    dry_run: train nothing: print the plan (stdout) and return it.
    pages_only: train nothing: write the results files of every row as workdir holds it.

  Returns:
    {"table", "workdir", "plan": [per row: "name", "kind", "command", "epochs",
     "tokens_per_epoch", "total_tokens", "params", "status", "note"]} with dry_run; else
    {"table", "workdir", "files", "trained" (the rows run now; none with pages_only),
     "rows": {name: status}}.

  Raises:
    tables.TableError: an unknown table or row (nothing is trained then).
    ReproduceError: a row directory holding another config's run (nothing is trained then).
    preemption.Stopped: SIGTERM or SIGINT stopped the row in training after saving it; the
      results files are written first, with that row running (rerunning resumes it).
    train.TrainingDiverged: the row in training diverged; the results files are written
      first, with that row diverged (its page gives the step and the reason).
  """
  rows = tables.row_names(rows)
  selected = tables.select_rows(table, rows)
  workdir = epath.Path(str(workdir))
  configs = {row.name: row_config(row, workdir) for row in tables.get_table(table).rows}
  if dry_run:
    cache = {}
    plan = [plan_row(row, workdir, configs[row.name], cache) for row in selected]
    print(format_plan(table, workdir, plan), flush=True)
    return {"table": table, "workdir": str(workdir), "plan": plan}
  check_workdir(table, workdir, configs)
  command = ("python -m attnlm_jax.main --mode=reproduce "
             f"--table={table} --workdir={as_typed(workdir)}"
             + (f" --rows={','.join(rows)}" if rows else ""))
  trained, summary = [], None
  for index, row in enumerate([] if pages_only else selected, 1):
    status = row_state(row, workdir)["status"]
    if status == table_page.FINISHED:
      logging.info("%s: row %s (%d of %d) finished, skipped", table, row.name, index,
                   len(selected))
      continue
    logging.info("%s: row %s (%d of %d) %s", table, row.name, index, len(selected),
                 "starting" if status == table_page.NOT_STARTED else f"resuming ({status})")
    try:
      _run_row(row, workdir, configs[row.name])
    except (preemption.Stopped, train.TrainingDiverged):
      write_results(table, workdir, configs, command)  # The page shows it running or diverged.
      raise
    trained.append(row.name)
    # After every trained row, so that a long table shows its progress.
    summary = write_results(table, workdir, configs, command)
  summary = summary or write_results(table, workdir, configs, command)
  return {"table": table, "workdir": str(workdir),
          "files": [str(workdir / name) for name in (RESULTS_JSON, RESULTS_MD, CURVES_PNG)],
          "trained": trained, "rows": {r["name"]: r["status"] for r in summary["rows"]}}
