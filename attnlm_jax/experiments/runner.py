"""The table runner (`--mode=reproduce`): trains a table's rows not yet finished in
`workdir/<row>` (resuming, refusing a directory of another config) and after each row writes
`results.json`, `results.md` and `curves.png`, rows in training shown running; `dry_run` prints
the plan, `pages_only` rewrites the pages from what `workdir` holds (docs/reproduce.md)."""

import dataclasses
import datetime
import functools
from typing import Any, Mapping, Optional, Sequence

from absl import logging
from etils import epath
import jax
import ml_collections

from attnlm_jax.common import config_files
from attnlm_jax.common import errors
from attnlm_jax.common import json_io
from attnlm_jax import data as data_lib
from attnlm_jax.data import locations
from attnlm_jax.evaluation import ensemble
from attnlm_jax.experiments import markdown
from attnlm_jax.experiments import printed
from attnlm_jax.experiments import row_status
from attnlm_jax.experiments import runs
from attnlm_jax.experiments import table_page
from attnlm_jax.experiments import tables
from attnlm_jax import models
from attnlm_jax.tagger import corpora as tagger_corpora
from attnlm_jax.tagger import tagging
from attnlm_jax.tagger import trainer as tagger_trainer
from attnlm_jax.training import checkpoints
from attnlm_jax.training import preemption
from attnlm_jax.training import run_config
from attnlm_jax.training import train

RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"
CURVES_PNG = "curves.png"

CORPUS_NOT_FOUND = "corpus not found"

class ReproduceError(errors.UserError):
  """A row directory that holds another config's run, or a needed row's weights missing."""


# --------------------------------------------------------------------------- rows


def _overrides(row: tables.Row, workdir: epath.Path) -> dict:
  """The row's overrides with the directories of the rows it reads filled in."""
  return {**row.overrides, **{key: str(workdir / name) for key, name in row.row_dirs.items()}}


def row_config(row: tables.Row, workdir: epath.Path) -> Optional[ml_collections.ConfigDict]:
  """The config a training or tagger row runs with (None for an interpolation)."""
  if row.kind == tables.INTERPOLATE:
    return None
  return config_files.load_config(tables.configs_dir() / row.config, _overrides(row, workdir))


def _flag(value) -> str:
  """A value as a command-line flag takes it."""
  return str(value).lower() if isinstance(value, bool) else str(value)


def row_command(row: tables.Row, workdir: epath.Path) -> str:
  """The command that runs this row alone."""
  workdir = locations.as_typed(workdir)
  if row.kind == tables.INTERPOLATE:
    return ("python -m attnlm_jax.main --mode=evaluate --split=test "
            f"--workdirs={','.join(str(workdir / m) for m in row.members)} "
            f"--weights={','.join(map(str, row.weights))}")
  mode = ["--mode=train_tagger"] if row.kind == tables.TAGGER else []
  flags = [f"--config.{key}={_flag(value)}" for key, value in _overrides(row, workdir).items()]
  return " ".join(["python -m attnlm_jax.main", *mode, f"--config=configs/{row.config}",
                   *flags, f"--workdir={row.directory(workdir)}"])


def _config_text(row: tables.Row) -> str:
  """The row's model as results.md shows it: config file, argument and overrides."""
  if row.kind == tables.INTERPOLATE:
    return (f"interpolation of {' and '.join(row.members)}, weights "
            f"{', '.join(map(str, row.weights))}")
  overrides = [f"{key}={_flag(value)}" for key, value in row.overrides.items()]
  overrides += [f"{key}=<{name}>" for key, name in row.row_dirs.items()]
  return " ".join([f"configs/{row.config}", *overrides])


# --------------------------------------------------------------------------- configs


def _saved_config(row: tables.Row, row_dir: epath.Path) -> Optional[dict]:
  """The part of a row directory's saved config that its config must match, or None."""
  if row.kind == tables.TAGGER and (row_dir / tagging.META_FILE).exists():
    return {"model": tagging.read_meta(row_dir)["config"]}
  if row.kind == tables.TRAIN and (row_dir / checkpoints.CONFIG_FILE).exists():
    return checkpoints.as_json(checkpoints.read_config(row_dir))
  return None


def _differences(row: tables.Row, row_dir: epath.Path, config) -> list[str]:
  """How the config saved in `row_dir` differs from the row's, one text per key."""
  saved = _saved_config(row, row_dir)
  if saved is None:
    return []
  expected = ({"model": checkpoints.as_json(config.model)} if row.kind == tables.TAGGER
              else checkpoints.as_json(config))
  return [f"{key} is {there} there, {here} here"
          for key, (there, here) in checkpoints.config_differences(expected, saved).items()]


def require_workdir(name: str, workdir: epath.Path, flag: str) -> None:
  """Refuses a missing table directory where `flag` only reads what its rows hold (a
  mistyped --workdir would otherwise write a page of rows never started)."""
  if not workdir.is_dir():
    raise ReproduceError(f"{workdir} not found: {flag} reads the rows that --mode=reproduce "
                         f"--table={name} --workdir=DIR trained; pass that DIR")


def check_workdir(name: str, workdir: epath.Path, configs: Mapping[str, Any]) -> None:
  """Refuses a row directory of table `name` holding a run of another config."""
  for row in tables.get_table(name).rows:
    differences = _differences(row, row.directory(workdir), configs[row.name])
    if differences:
      raise ReproduceError(
          f"{row.directory(workdir)} holds a run of another config than row {row.name} of table "
          f"{name} ({'; '.join(differences)}): use another --workdir or remove "
          f"{row.directory(workdir)}")


def _holds_weights(row: tables.Row, row_dir: epath.Path) -> bool:
  """Whether a row directory holds the weights a row reading it loads (a training run's
  checkpoint, a tagger's parameters); an interpolation has none to load."""
  if row.kind == tables.TRAIN:
    return checkpoints.has_weights(row_dir)
  if row.kind == tables.TAGGER:
    return (row_dir / tagging.PARAMS_FILE).exists()
  return True


def check_needed_weights(name: str, workdir: epath.Path, selected: Sequence[tables.Row]) -> None:
  """Refuses, before anything trains, a row to run that reads the weights of a row finished
  by its log but without them in `workdir` (a log copied from docs/results keeps none)."""
  by_name = {row.name: row for row in tables.get_table(name).rows}
  for row in selected:
    if row_status.read(row, workdir)["status"] == row_status.FINISHED:
      continue
    for needed in (by_name[need] for need in row.needs):
      needed_dir = needed.directory(workdir)
      if (row_status.read(needed, workdir)["status"] == row_status.FINISHED
          and not _holds_weights(needed, needed_dir)):
        raise ReproduceError(
            f"row {row.name} of table {name} reads the weights of row {needed.name}, finished "
            f"by its results in {needed_dir} but without its weights there (results copied "
            f"from docs/results keep none): remove {needed_dir} and run again to train it anew")


def row_record(row: tables.Row, workdir: epath.Path, config) -> dict:
  """The row as results.json lists it (None for what does not apply or is not known yet)."""
  record = {"name": row.name, "kind": row.kind,
            "config": f"configs/{row.config}" if row.config else None,
            "overrides": dict(row.overrides), "model": _config_text(row),
            "command": row_command(row, workdir), "status": row_status.NOT_STARTED, "params": None,
            "num_epochs": config.train.num_epochs if config else None,
            "learning_rate": config.train.learning_rate if config else None,
            "batches": (table_page.batch_kind(config.data)
                        if config and row.kind == tables.TRAIN else None),
            "epochs_run": None,
            "best_epoch": None, "untested_best_epoch": None,
            **dict.fromkeys(runs.RUN_KEYS), "valid_curve": [],
            "ran_on": [], "code_versions": [], "epoch_seconds": {}, "fastest_epoch_seconds": {},
            "paper": None, "differences": None,
            # False for a row trained without a start symbol (markdown.standard_perplexity).
            "every_token_predicted": (bool(config.data.get("start_symbol", True))
                                      if config and row.kind == tables.TRAIN else None)}
  if row.note:
    record["note"] = row.note
  record.update(row_status.read(row, workdir))
  if row.paper:
    paper = printed.paper_result(*row.paper)
    record["paper"] = dataclasses.asdict(paper)
    record["differences"] = printed.paper_differences(record, paper)
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
             "command": command, "workdir": str(locations.as_typed(workdir)),
             "rows": [row_record(row, workdir, configs[row.name]) for row in table.rows]}
  if table.reference:
    summary.update(reference=table.reference, tolerance=table.tolerance,
                   epoch_differences=table_page.epoch_differences(summary["rows"], table.reference))
  workdir.mkdir(parents=True, exist_ok=True)
  json_io.write_json(workdir / RESULTS_JSON, summary)
  (workdir / RESULTS_MD).write_text(table_page.format_markdown(summary))
  runs.plot_valid_curves({r["name"]: r["valid_curve"] for r in summary["rows"]},
                            workdir / CURVES_PNG,
                            f"{name}: validation perplexity per epoch")
  return summary


# --------------------------------------------------------------------------- the plan


def _training_data(data_config: ml_collections.ConfigDict, cache: dict) -> data_lib.LMData:
  """The corpus of a data config (without POS tags), loaded once per config.

  Raises:
    CorpusError: its files are missing.
  """
  key = data_config.to_json(sort_keys=True)
  if key not in cache:
    cache[key] = data_lib.load(data_config)
  return cache[key]


def _param_count(config: ml_collections.ConfigDict, vocab_size: int) -> Optional[int]:
  """Trainable parameters of the row's model (None for POS-tag inputs before their tagger)."""
  try:
    config = run_config.complete(config, vocab_size)
  except tagger_corpora.TaggerError:
    return None
  shapes = jax.eval_shape(functools.partial(models.init, config=config.model),
                          jax.random.key(0))
  return models.count_params(shapes)


def _tagger_tokens(config: ml_collections.ConfigDict) -> int:
  """Tagged training words of the tagger's corpus per epoch.

  Raises:
    TaggerError: its files are missing.
  """
  return sum(len(words) for words, _ in tagger_corpora.training_sentences(config.data))


def plan_row(row: tables.Row, workdir: epath.Path, config, cache: dict) -> dict:
  """What training the row takes: epochs, tokens, parameters, and its status in workdir."""
  state = row_status.read(row, workdir)
  differences = _differences(row, row.directory(workdir), config) if config else []
  paper = printed.paper_result(*row.paper) if row.paper else None
  plan = {"name": row.name, "kind": row.kind, "command": row_command(row, workdir),
          "printed": (f"{markdown.valid_test_cell(paper.valid, paper.test)} ({paper.paper})"
                      if paper else "-"),
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
  except (data_lib.CorpusError, tagger_corpora.TaggerError) as e:
    plan["note"] = f"{CORPUS_NOT_FOUND}: {e}"
    return plan
  plan["total_tokens"] = plan["epochs"] * plan["tokens_per_epoch"]
  return plan


def format_plan(name: str, workdir: epath.Path, plan: Sequence[dict]) -> str:
  """The plan as an aligned text table and each row's command."""
  headers = ("row", "kind", "epochs", "tokens/epoch", "total tokens", "params", "status",
             "printed valid / test")
  lines = [(p["name"], p["kind"], markdown.count(p["epochs"]),
            CORPUS_NOT_FOUND if p["note"].startswith(CORPUS_NOT_FOUND)
            else markdown.count(p["tokens_per_epoch"]),
            markdown.count(p["total_tokens"]), markdown.count(p["params"]), p["status"],
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
  row_dir = row.directory(workdir)
  if row.kind == tables.TRAIN:
    train.train_and_evaluate(config, row_dir)
  elif row.kind == tables.TAGGER:
    tagger_trainer.train_tagger(config, row_dir)
  else:
    mixture = {split: ensemble.interpolate([workdir / m for m in row.members], split,
                                           weights=list(row.weights))
               for split in row_status.SPLITS}
    mixture[row_status.MEMBER_LOGS] = {
        member: row_status.member_test_perplexity(workdir / member) for member in row.members}
    json_io.write_json(row_dir / row_status.INTERPOLATION_FILE, mixture)


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
    ReproduceError: a row directory holding another config's run, a row to run that reads
      the weights of a finished row without them (nothing is trained then), or with
      `pages_only` a workdir that does not exist.
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
  if pages_only:
    require_workdir(table, workdir, "--pages_only")
  check_workdir(table, workdir, configs)
  check_needed_weights(table, workdir, [] if pages_only else selected)
  command = ("python -m attnlm_jax.main --mode=reproduce "
             f"--table={table} --workdir={locations.as_typed(workdir)}"
             + (f" --rows={','.join(rows)}" if rows else ""))
  trained, summary = [], None
  for index, row in enumerate([] if pages_only else selected, 1):
    status = row_status.read(row, workdir)["status"]
    if status == row_status.FINISHED:
      logging.info("%s: row %s (%d of %d) finished, skipped", table, row.name, index,
                   len(selected))
      continue
    logging.info("%s: row %s (%d of %d) %s", table, row.name, index, len(selected),
                 "starting" if status == row_status.NOT_STARTED else f"resuming ({status})")
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
