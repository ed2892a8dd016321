"""Tests of attnlm_jax.experiments.runner: the demo table trained, stopped, resumed, skipped and
reported; rows in progress shown running; the paper-scale plans; refused workdirs; the table
definitions."""

import hashlib
import json
import os
import shutil
import signal
from typing import Optional

import pytest

from attnlm_jax.common import config_files
from attnlm_jax.common import logging_utils
from attnlm_jax.common import provenance
from attnlm_jax.evaluation import evaluate
from attnlm_jax.experiments import printed
from attnlm_jax.experiments import row_status
from attnlm_jax.experiments import runner
from attnlm_jax.experiments import runs
from attnlm_jax.experiments import table_page
from attnlm_jax.experiments import tables
from attnlm_jax.tagger import tagging
from attnlm_jax.training import checkpoints
from attnlm_jax.training import preemption
from attnlm_jax.training import schedules
from attnlm_jax.training import train
import tiny_config

SALTON_ROWS = ("none", "proj", "single", "combined", "average", "conv1x1", "none_seed1",
               "proj_seed1", "single_seed1", "none_bfloat16", "released", "released_attention",
               "released_seed1", "released_attention_seed1", "average_in_sequence")
STOPPING_RULE_ROWS = ("none", "proj", "combined", "average", "conv1x1", "none_seed1",
                      "proj_seed1", "none_bfloat16", "average_in_sequence")
RELEASED_ROWS = ("released", "released_attention", "released_seed1",
                 "released_attention_seed1")   # 23 epochs: their lr halves from 14.


def _most_epochs(name: str) -> int:
  return 22 if name in STOPPING_RULE_ROWS else 23 if name in RELEASED_ROWS else 40


def _records(path) -> list[dict]:
  return [json.loads(line) for line in path.read_text().splitlines()]


def _digest(path) -> str:
  return hashlib.sha256(path.read_bytes()).hexdigest()


def _configs(name, workdir) -> dict:
  return {row.name: runner.row_config(row, workdir) for row in tables.TABLES[name].rows}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
  """The demo table: `single` stopped by SIGTERM after its first epoch, then the whole table
  run.

  Returns:
    (workdir, the dry-run plan after the stop, the summary of the full run, the results.json
     rows and results.md the stop left).
  """
  workdir = tmp_path_factory.mktemp("demo_table")
  save, learning_rate = checkpoints.Checkpoints.save, schedules.learning_rate

  def synchronous_save(self, *args, **kwargs):
    save(self, *args, **kwargs)
    self.wait()  # The checkpoint is on disk before the stop.

  def stopped_before_epoch_2(epoch, *args):
    if epoch == 2:  # As a SIGTERM during epoch 1 stops it, once epoch 1 is saved.
      raise preemption.Stopped(signal.SIGTERM, "stopped by SIGTERM")
    return learning_rate(epoch, *args)

  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(checkpoints.Checkpoints, "save", synchronous_save)
    patch.setattr(schedules, "learning_rate", stopped_before_epoch_2)
    with pytest.raises(preemption.Stopped):
      runner.run("demo", workdir, rows=["single"])
  stopped_page = (json.loads((workdir / runner.RESULTS_JSON).read_text())["rows"],
                  (workdir / runner.RESULTS_MD).read_text())
  plan = runner.run("demo", str(workdir), dry_run=True)["plan"]
  return workdir, plan, runner.run("demo", workdir), stopped_page


def test_a_stopped_row_is_shown_running_and_resumes_from_its_checkpoint(demo):
  workdir, plan, summary, (stopped_rows, stopped_markdown) = demo
  assert [(p["name"], p["status"]) for p in plan] == [("none", "not started"),
                                                      ("single", "running: epoch 1 of 2")]
  assert summary["trained"] == ["none", "single"]
  records = _records(workdir / "single" / logging_utils.METRICS_FILE)
  starts = [r for r in records if r.get("event") == "start"]
  first_epoch = next(r for r in records if r.get("epoch") == 1 and "valid_perplexity" in r)
  assert [s["step"] for s in starts] == [0, first_epoch["step"]]   # resumed after epoch 1
  assert [r["epoch"] for r in records if "valid_perplexity" in r] == [1, 2]
  assert "final_test_perplexity" in records[-1]
  # What the stop left: the page shows `single` running with its first epoch's figures.
  single = next(row for row in stopped_rows if row["name"] == "single")
  assert single["status"] == "running: epoch 1 of 2"
  assert single["epochs_run"] == single["best_epoch"] == 1
  assert single["best_valid_perplexity"] == first_epoch["valid_perplexity"]
  assert single["last_epoch_seconds"] == first_epoch["train_seconds"] > 0
  assert single["patience_ends"] is None     # best epoch 1 + patience 2 is past epoch 2
  assert single["test_perplexity"] is None
  assert [row["status"] for row in stopped_rows] == ["not started", single["status"]]
  valid = f"{first_epoch['valid_perplexity']:.1f}"
  assert (f"| running: 1 of 2 (best 1) | {valid} (so far) | - | - | - |"
          in stopped_markdown)
  assert (f"- `single` is still training: 1 of 2 epochs done, best valid perplexity so far "
          f"{valid} (epoch 1), last epoch {first_epoch['train_seconds']:,.1f} s."
          in stopped_markdown.splitlines())


def test_run_writes_results_json_md_and_curves(demo):
  workdir, _, summary, _ = demo
  assert summary["rows"] == {"none": "finished", "single": "finished"}
  table = json.loads((workdir / runner.RESULTS_JSON).read_text())
  assert table["table"] == "demo"
  assert table["command"] == ("python -m attnlm_jax.main --mode=reproduce --table=demo "
                              f"--workdir={workdir}")
  markdown = (workdir / runner.RESULTS_MD).read_text().splitlines()
  assert table["command"] in markdown[2]
  for row in table["rows"]:
    records = _records(workdir / row["name"] / logging_utils.METRICS_FILE)
    final = records[-1]
    assert row["status"] == "finished" and row["kind"] == "train"
    assert row["config"] == f"configs/demo.py:score={row['name']}"
    assert row["command"].startswith(f"python -m attnlm_jax.main {'--config=' + row['config']}")
    assert row["params"] == records[0]["num_params"]
    assert row["best_epoch"] == final["best_epoch"] and row["epochs_run"] == 2
    assert row["valid_curve"] == [[r["epoch"], r["valid_perplexity"]] for r in records
                                  if "valid_perplexity" in r]
    line = next(line for line in markdown if line.startswith(f"| {row['name']} |"))
    cells = [cell.strip() for cell in line.strip("|").split("|")]
    assert cells[2] == f"{row['params']:,}"
    assert cells[3] == f"2 ({final['best_epoch']})"
    for cell, key in zip(cells[4:8], runs.RUN_KEYS):
      assert row[key] == final[f"final_{key}"]
      assert cell == f"{final[f'final_{key}']:.1f}"
    assert row["paper"] is None and cells[8:] == ["-"] * 4
    assert "best_valid_perplexity" not in row and "(so far)" not in line
  assert "still training" not in "\n".join(markdown)
  host_cpus = len(os.sched_getaffinity(0))   # tests/conftest.py: 2 devices on the host's CPUs
  place = (f"cpu ({provenance.cpu_model()}), 2 devices, "
           f"{host_cpus} host CPU{'' if host_cpus == 1 else 's'}")
  assert [row["ran_on"] for row in table["rows"]] == [[place], [place]]
  versions = [row["code_versions"] for row in table["rows"]]   # Each row's one session.
  assert versions == [[records[0]["code_version"]] for records in (
      _records(workdir / row["name"] / logging_utils.METRICS_FILE) for row in table["rows"])]
  assert all(len(v) == 1 and v[0] for v in versions)
  assert (f"- Code that trained them (`code_version` in each log): `none` {versions[0][0]}; "
          f"`single` {versions[1][0]}.") in markdown
  noted = {}
  for row in table["rows"]:   # Two epochs, one session: their median and the faster one.
    epochs = [r for r in _records(workdir / row["name"] / logging_utils.METRICS_FILE)
              if "valid_perplexity" in r]
    assert [r["epoch"] for r in epochs] == [1, 2]
    first, both = (r["train_seconds"] for r in epochs)
    second = both - first
    assert row["epoch_seconds"] == {place: pytest.approx((first + second) / 2)}
    assert row["fastest_epoch_seconds"] == {place: pytest.approx(min(first, second))}
    noted[row["name"]] = (f"`{row['name']}` ({min(first, second):,.1f} s its fastest epoch, "
                          f"{(first + second) / 2:,.1f} s the median)")
  assert f"- Trained on {place}: {noted['none']}, {noted['single']}." in markdown
  assert (workdir / runner.CURVES_PNG).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_rerun_trains_nothing(demo, monkeypatch):
  workdir = demo[0]
  metrics = [workdir / name / logging_utils.METRICS_FILE for name in ("none", "single")]
  before = [_digest(path) for path in metrics]
  monkeypatch.setattr(train, "train_and_evaluate", tiny_config.must_not_run)
  summary = runner.run("demo", workdir)
  assert summary["trained"] == []
  assert summary["rows"] == {"none": "finished", "single": "finished"}
  assert [_digest(path) for path in metrics] == before


def test_a_row_directory_of_another_config_is_refused(demo, tmp_path, monkeypatch):
  (tmp_path / "none").mkdir()
  shutil.copy(demo[0] / "single" / checkpoints.CONFIG_FILE, tmp_path / "none")
  monkeypatch.setattr(train, "train_and_evaluate", tiny_config.must_not_run)
  with pytest.raises(runner.ReproduceError) as error:
    runner.run("demo", tmp_path, rows=["none"])
  message = str(error.value)
  assert "\n" not in message
  assert "model.score is single there, none here" in message
  assert f"use another --workdir or remove {tmp_path / 'none'}" in message
  assert sorted(p.name for p in tmp_path.rglob("*")) == ["config.json", "none"]


def test_the_config_check_ignores_paths_cadence_and_model_fields_added_since(demo, tmp_path):
  saved = json.loads((demo[0] / "none" / checkpoints.CONFIG_FILE).read_text())
  saved["data"]["data_dir"] = "/elsewhere"
  saved["train"]["log_every_steps"] = 7
  del saved["model"]["unroll"]      # An older config.json: the field takes its default.
  (tmp_path / "none").mkdir()
  (tmp_path / "none" / checkpoints.CONFIG_FILE).write_text(json.dumps(saved))
  runner.check_workdir("demo", tmp_path, _configs("demo", tmp_path))
  saved["model"]["hidden_size"] = 32
  (tmp_path / "none" / checkpoints.CONFIG_FILE).write_text(json.dumps(saved))
  with pytest.raises(runner.ReproduceError, match="model.hidden_size is 32 there, 16 here"):
    runner.check_workdir("demo", tmp_path, _configs("demo", tmp_path))


def test_dry_run_prints_the_paper_scale_plan_and_trains_nothing(shared_data, tmp_path,
                                                                 capsys, monkeypatch):
  del shared_data  # The PTB files, read from the data root tests/conftest.py sets.
  monkeypatch.setattr(train, "train_and_evaluate", tiny_config.must_not_run)
  plan = runner.run("salton_ptb", tmp_path / "table", dry_run=True)["plan"]
  printed = capsys.readouterr().out
  assert [p["name"] for p in plan] == list(SALTON_ROWS)
  single = plan[SALTON_ROWS.index("single")]
  assert 14.4e6 < single["params"] < 14.6e6       # the paper prints 14.5M
  for row in plan:
    epochs = _most_epochs(row["name"])
    assert row["epochs"] == epochs and row["status"] == "not started"
    assert row["total_tokens"] == epochs * row["tokens_per_epoch"] > 800_000 * epochs
    assert f"{row['params']:,}" in printed and row["command"] in printed
    score, seeded, _ = (row["name"].removesuffix("_bfloat16").removesuffix("_in_sequence")
                        .partition("_seed"))
    config = ("released.py:score=single,memory=" + ("filled" if "attention" in score
                                                     else "zero_slot")
              if row["name"] in RELEASED_ROWS else f"ptb.py:score={score}")
    assert f"--config=configs/{config}" in row["command"]
    assert ("--config.seed=1 --config.data.seed=1" in row["command"]) == bool(seeded)
    assert ("--config.model.compute_dtype=bfloat16" in row["command"]) == (
        row["name"] == "none_bfloat16")
    assert ("--config.data.shuffle=false --config.data.bucket=false" in row["command"]) == (
        row["name"] == "average_in_sequence")
  assert not (tmp_path / "table").exists()


def test_the_stopping_rule_ends_its_rows_after_epoch_22_and_their_page_says_so(tmp_path):
  for row in tables.TABLES["salton_ptb"].rows:
    config = runner.row_config(row, tmp_path)
    ruled = row.name in STOPPING_RULE_ROWS + RELEASED_ROWS
    assert config.train.num_epochs == _most_epochs(row.name), row.name
    assert config.train.patience == 10 and bool(row.note) == ruled
  runner.run("salton_ptb", tmp_path, pages_only=True)
  table = json.loads((tmp_path / runner.RESULTS_JSON).read_text())
  assert {r["name"]: r["num_epochs"] for r in table["rows"]} == {
      name: _most_epochs(name) for name in SALTON_ROWS}
  assert sorted(r["name"] for r in table["rows"] if "note" in r) == sorted(
      STOPPING_RULE_ROWS + RELEASED_ROWS)
  markdown = (tmp_path / runner.RESULTS_MD).read_text().splitlines()
  noted = [line for line in markdown if line.endswith(f" {tables.STOPPING_RULE_NOTE}.")]
  assert noted == [f"- `{name}` {tables.STOPPING_RULE_NOTE}." for name in STOPPING_RULE_ROWS]


def test_the_stopping_rules_evidence_is_the_finished_single_rows_own_result():
  """docs/reproduce.md, "The stopping rule": `single`, trained to the recipe's end, had its best
  epoch by epoch 22, and its directory as it stood then evaluates to the finished row's test
  perplexity (`probes/single_epoch22_test.json`, the output of the command quoted there)."""
  committed = tiny_config.COMMITTED_RESULTS / "salton_ptb"
  row = {r["name"]: r for r in
         json.loads((committed / runner.RESULTS_JSON).read_text())["rows"]}["single"]
  assert row["status"] == "finished" and "note" not in row
  assert row["best_epoch"] <= 22 < row["epochs_run"]
  epochs = [r for r in _records(committed / "single" / logging_utils.METRICS_FILE)
            if "valid_perplexity" in r]
  best = min(epochs, key=lambda r: r["valid_perplexity"])
  at_epoch_22 = json.loads((committed / "probes" / "single_epoch22_test.json").read_text())
  assert at_epoch_22["split"] == "test" and at_epoch_22["step"] == best["step"]
  assert at_epoch_22["perplexity"] == row["test_perplexity"]
  assert (at_epoch_22["perplexity_paper_convention"]
          == row["test_perplexity_paper_convention"])


def test_dry_run_without_the_corpora_says_so_for_each_row(tmp_path, capsys, monkeypatch):
  monkeypatch.setenv("ATTNLM_DATA_DIR", str(tmp_path / "no_data"))
  for name in ("salton_ptb", "das"):
    plan = runner.run(name, tmp_path / name, dry_run=True)["plan"]
    printed = capsys.readouterr().out
    trained = [p for p in plan if p["kind"] != tables.INTERPOLATE]
    assert all(p["note"].startswith("corpus not found") for p in trained)
    assert all(p["tokens_per_epoch"] is None and p["epochs"] for p in trained)
    assert printed.count("corpus not found") >= 2 * len(trained)   # table and notes
  assert not list(tmp_path.iterdir())


def test_rows_bring_the_rows_they_need(tmp_path):
  names = lambda rows: [row.name for row in rows]
  assert names(tables.select_rows("das", ["interpolated"])) == [
      "tagger", "lstm", "das_lstmn_tags", "interpolated"]
  assert names(tables.select_rows("das", ["lstm", "das"])) == ["lstm", "das"]
  assert names(tables.select_rows("demo")) == ["none", "single"]
  plan = runner.run("demo", tmp_path, rows=["single"], dry_run=True)["plan"]
  assert [p["name"] for p in plan] == ["single"]
  for rows, expected in (("single", ["single"]), ("none,single", ["none", "single"]),
                         ("", ["none", "single"])):     # "" selects no row: all of them
    plan = runner.run("demo", tmp_path, rows=rows, dry_run=True)["plan"]
    assert [p["name"] for p in plan] == expected, rows
  das = tables.TABLES["das"].rows
  command = runner.row_command(das[5], tmp_path)
  assert f"--config.data.tagger_dir={tmp_path / 'tagger'}" in command
  assert runner.row_config(das[5], tmp_path).data.tagger_dir == str(tmp_path / "tagger")


def test_commands_under_the_current_directory_are_printed_relative(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  command = runner.row_command(tables.TABLES["das"].rows[5], tmp_path / "runs" / "das")
  assert command.endswith("--config.data.tagger_dir=runs/das/tagger "
                          "--workdir=runs/das/das_lstmn_tags")


def test_unknown_tables_and_rows_are_one_line_errors_listing_the_valid_ones():
  with pytest.raises(tables.TableError) as error:
    runner.run("salton", "/tmp/unused")
  assert str(error.value) == ("unknown table 'salton': choose --table from zaremba, "
                              "salton_ptb, salton_wt2, das, das_recipe, ptb_cpu, precision, demo")
  with pytest.raises(tables.TableError) as error:
    runner.run("salton_ptb", "/tmp/unused", rows=["single", "bogus"], dry_run=True)
  assert str(error.value) == ("unknown row bogus of table salton_ptb: choose --rows from "
                              + ", ".join(SALTON_ROWS))


def _synthetic_run(row_dir, final: Optional[dict] = None, train_seconds: bool = True) -> None:
  """A run's metrics.jsonl, finished when `final` is given: epoch 1 validated twice (as after
  a resume) and epochs 2 (the best) and 3, each with its cumulative `train_seconds` unless
  `train_seconds` is False (an older log)."""
  row_dir.mkdir()
  epochs = [{"step": 10, "epoch": 1, "valid_perplexity": 130.0, "train_seconds": 50.0},
            {"step": 10, "epoch": 1, "valid_perplexity": 120.0, "train_seconds": 55.0},
            {"step": 20, "epoch": 2, "valid_perplexity": 100.0, "train_seconds": 115.0},
            {"step": 30, "epoch": 3, "valid_perplexity": 105.0, "train_seconds": 180.5}]
  if not train_seconds:
    epochs = [{k: v for k, v in r.items() if k != "train_seconds"} for r in epochs]
  records = [{"event": "start", "step": 0, "num_params": 14_500_000,
              "config": {"data": {"corpus": "ptb"}, "train": {"num_epochs": 40, "patience": 10},
                         "model": {"score": "single", "hidden_size": 650, "num_layers": 2}}},
             *epochs, *([{"step": 20, "best_epoch": 2, **final}] if final else [])]
  (row_dir / logging_utils.METRICS_FILE).write_text(
      "".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture
def synthetic(monkeypatch):
  """Table `synthetic` of three printed rows (Salton et al. on PTB and WikiText-2, Zaremba et
  al.) in tables.TABLES, with training forbidden; returns its name."""
  table = tables.Table("synthetic", (
      tables.Row("single", "ptb.py:score=single", paper=("ptb", "Attentive LM, single score")),
      tables.Row("medium", "ptb.py:score=none", paper=("ptb", "Medium regularized LSTM")),
      tables.Row("average", "wikitext2.py:score=average",
                    paper=("wikitext2", "Averaging RNN-LM")),
  ))
  monkeypatch.setitem(tables.TABLES, "synthetic", table)
  monkeypatch.setattr(train, "train_and_evaluate", tiny_config.must_not_run)
  return "synthetic"


def test_differences_to_the_printed_numbers_follow_the_paper_rule(synthetic, tmp_path):
  final = {"final_valid_perplexity": 90.5, "final_test_perplexity": 88.0,
           "final_valid_perplexity_paper_convention": 75.0,
           "final_test_perplexity_paper_convention": 72.5}
  _synthetic_run(tmp_path / "single", final)
  _synthetic_run(tmp_path / "medium", final)
  runner.run(synthetic, tmp_path, rows=["single", "medium"])
  rows = {r["name"]: r for r in json.loads((tmp_path / runner.RESULTS_JSON).read_text())["rows"]}
  single = rows["single"]["differences"]       # released code's rule: 71.7 / 70.1
  assert single["compared"] == "perplexity_paper_convention"
  assert single["valid"]["difference"] == pytest.approx(75.0 - 71.7)
  assert single["test"]["percent"] == pytest.approx(100 * (72.5 - 70.1) / 70.1)
  medium = rows["medium"]["differences"]       # Zaremba et al., standard rule: 86.2 / 82.7
  assert medium["compared"] == "perplexity"
  assert medium["test"]["difference"] == pytest.approx(88.0 - 82.7)
  assert rows["single"]["valid_curve"] == [[1, 120.0], [2, 100.0], [3, 105.0]]
  assert rows["average"]["status"] == "not started" and rows["average"]["differences"] == {
      "compared": "perplexity_paper_convention", "valid": None, "test": None}
  markdown = (tmp_path / runner.RESULTS_MD).read_text()
  assert ("| single | configs/ptb.py:score=single | 14,500,000 | 3 (2) | 90.5 | 88.0 | 75.0 | "
          "72.5 | 71.7 / 70.1 | Salton, Ross & Kelleher 2017, released code's rule (first "
          "word not predicted) | +3.3 (+4.6%) | +2.4 (+3.4%) |") in markdown
  assert "| medium |" in markdown and "| +4.3 (+5.0%) | +5.3 (+6.4%) |" in markdown
  assert ("| average | configs/wikitext2.py:score=average | - | not run | - | - | - | - | "
          "74.6 / 71.3 |") in markdown


def test_a_row_tested_without_its_best_epochs_checkpoint_says_which_epoch_it_tested(
    synthetic, tmp_path):
  final = {"final_valid_perplexity": 105.0, "final_test_perplexity": 101.0,
           "final_valid_perplexity_paper_convention": 80.0,
           "final_test_perplexity_paper_convention": 78.0}
  _synthetic_run(tmp_path / "single", {**final, "best_epoch": 3})   # epoch 2's was missing
  _synthetic_run(tmp_path / "medium", final)                         # epoch 2's, the best
  runner.run(synthetic, tmp_path, rows=["single", "medium"])
  rows = {r["name"]: r for r in json.loads((tmp_path / runner.RESULTS_JSON).read_text())["rows"]}
  assert (rows["single"]["best_epoch"], rows["single"]["untested_best_epoch"]) == (3, 2)
  assert (rows["medium"]["best_epoch"], rows["medium"]["untested_best_epoch"]) == (2, None)
  markdown = (tmp_path / runner.RESULTS_MD).read_text().splitlines()
  assert "| single | configs/ptb.py:score=single | 14,500,000 | 3 (2, tested 3) | 105.0 |" in (
      "\n".join(markdown))
  assert ("- `single`'s test is of epoch 3's parameters (valid perplexity 105.0), not of its "
          "best epoch 2's (100.0): that epoch's checkpoint was not in the workdir where the "
          "run finished.") in markdown
  assert not [line for line in markdown if line.startswith("- `medium`'s test")]


def test_a_row_stopped_by_a_signal_is_shown_running_and_the_stop_goes_on(synthetic, tmp_path,
                                                                          monkeypatch):
  def stopped(row, workdir, config):   # Epochs 1 to 3 saved, then SIGTERM.
    del config
    _synthetic_run(workdir / row.name)
    raise preemption.Stopped(signal.SIGTERM, "stopped by SIGTERM")

  monkeypatch.setattr(runner, "_run_row", stopped)
  _synthetic_run(tmp_path / "medium", train_seconds=False)   # started before the field
  with pytest.raises(preemption.Stopped):
    runner.run(synthetic, tmp_path, rows=["single"])
  rows = {r["name"]: r for r in json.loads((tmp_path / runner.RESULTS_JSON).read_text())["rows"]}
  single, medium = rows["single"], rows["medium"]
  assert single["status"] == medium["status"] == "running: epoch 3 of 40"
  assert (single["epochs_run"], single["best_epoch"], single["best_valid_perplexity"]) == (
      3, 2, 100.0)
  assert single["last_epoch_seconds"] == pytest.approx(180.5 - 115.0)
  assert medium["last_epoch_seconds"] is None
  assert single["valid_curve"] == [[1, 120.0], [2, 100.0], [3, 105.0]]
  assert single["valid_perplexity"] is None and single["differences"]["valid"] is None
  assert not runs.is_finished(tmp_path / "single")
  assert rows["average"]["status"] == "not started"
  markdown = (tmp_path / runner.RESULTS_MD).read_text().splitlines()
  assert ("| single | configs/ptb.py:score=single | 14,500,000 | running: 3 of 40 (best 2) | "
          "100.0 (so far) | - | - | - | 71.7 / 70.1 |") in "\n".join(markdown)
  assert single["patience_ends"] == 12                 # best epoch 2, patience 10
  assert ("- `single` is still training: 3 of 40 epochs done, best valid perplexity so far "
          "100.0 (epoch 2), last epoch 65.5 s; early stopping ends it after epoch 12 unless an "
          "epoch before then improves on epoch 2.") in markdown
  assert ("- `medium` is still training: 3 of 40 epochs done, best valid perplexity so far "
          "100.0 (epoch 2); early stopping ends it after epoch 12 unless an epoch before then "
          "improves on epoch 2.") in markdown


def test_a_row_that_diverges_is_shown_diverged_and_the_error_goes_on(synthetic, tmp_path,
                                                                     monkeypatch):
  reason = "the training loss is 18.43 nats per token, more than twice a uniform guess's 9.21"

  def diverging(row, workdir, config):   # Epochs 1 to 3 validated, then divergence in epoch 4.
    del config
    _synthetic_run(workdir / row.name)
    with (workdir / row.name / logging_utils.METRICS_FILE).open("a") as log:
      log.write(json.dumps({"event": "diverged", "step": 35, "learning_rate": 1.0,
                            "reason": reason}) + "\n")
    raise train.TrainingDiverged("training diverged at step 35", 35, 1.0, reason)

  monkeypatch.setattr(runner, "_run_row", diverging)
  with pytest.raises(train.TrainingDiverged):
    runner.run(synthetic, tmp_path, rows=["single"])
  single = json.loads((tmp_path / runner.RESULTS_JSON).read_text())["rows"][0]
  assert single["status"] == "diverged: step 35" and single["epochs_run"] == 3
  assert single["diverged"] == {"step": 35, "learning_rate": 1.0, "reason": reason}
  assert not runs.is_finished(tmp_path / "single")
  markdown = (tmp_path / runner.RESULTS_MD).read_text()
  assert ("| single | configs/ptb.py:score=single | 14,500,000 | diverged: step 35 (epoch 4) | "
          "- | - | - | - | 71.7 / 70.1 |") in markdown
  assert f"- `single` diverged at step 35 (learning rate 1): {reason}." in markdown
  assert "`single` is still training" not in markdown
  # A later session of the row (a smaller learning rate, resumed) is no longer diverged.
  with (tmp_path / "single" / logging_utils.METRICS_FILE).open("a") as log:
    log.write(json.dumps({"event": "start", "step": 30, "num_params": 14_500_000,
                          "config": {"data": {"corpus": "ptb"}, "train": {"num_epochs": 40},
                                     "model": {"score": "single", "hidden_size": 650,
                                               "num_layers": 2}}}) + "\n")
  assert row_status.read(tables.get_table(synthetic).rows[0], tmp_path)["status"] == (
      "running: epoch 3 of 40")


def test_tables_are_well_formed():
  for name, table in tables.TABLES.items():
    names = [row.name for row in table.rows]
    assert len(set(names)) == len(names), name
    for pair in table.comparisons:  # judged over seeds: both rows and a second seed of each
      assert all(row in names and f"{row}_seed1" in names for row in pair), (name, pair)
    for index, row in enumerate(table.rows):
      assert set(row.needs) <= set(names[:index]), (name, row.name)  # needed rows come first
      if row.paper:
        printed.paper_result(*row.paper)
      if row.kind == tables.INTERPOLATE:
        assert len(row.members) == len(row.weights) >= 2 and sum(row.weights) == 1
        continue
      config = config_files.load_config(tables.configs_dir() / row.config)
      for key in (*row.overrides, *row.row_dirs):
        section, _, field = key.rpartition(".")
        assert field in (config[section] if section else config), (name, row.name, key)


def test_tagger_and_interpolation_rows(demo, tmp_path, monkeypatch):
  conll = tmp_path / "conll"
  conll.mkdir()
  sentence = "the DT B-NP\ndog NN I-NP\nruns VBZ B-VP\nfast RB B-ADVP\n"
  for split in ("train", "test"):
    (conll / f"{split}.txt").write_text("\n".join([sentence] * 30))
  lm_corpus = tmp_path / "lm_corpus"                # "fast" is not in its vocabulary
  lm_corpus.mkdir()
  (lm_corpus / "ptb.train.txt").write_text(" the dog runs \n")
  demo_rows = tables.TABLES["demo"].rows

  def table(tagger_units):
    tagger = {"data.data_dir": str(conll), "data.treebank_dir": "",
              "data.lm_data_dir": str(lm_corpus), "model.embed_size": 8,
              "model.suffix_size": 4, "model.hidden_size": tagger_units, "train.num_epochs": 1}
    return tables.Table("mixed", (
        *demo_rows, tables.Row("tagger", "tagger.py", tagger, kind=tables.TAGGER),
        tables.Row("mixed", kind=tables.INTERPOLATE, members=("none", "single"),
                      weights=(0.5, 0.5))))

  monkeypatch.setitem(tables.TABLES, "mixed", table(8))
  workdir = tmp_path / "table"
  for row in demo_rows:                 # finished: only the new rows run
    shutil.copytree(demo[0] / row.name, workdir / row.name)
  summary = runner.run("mixed", workdir)
  assert summary["trained"] == ["tagger", "mixed"]
  rows = {r["name"]: r for r in json.loads((workdir / runner.RESULTS_JSON).read_text())["rows"]}
  mixture = json.loads((workdir / "mixed" / row_status.INTERPOLATION_FILE).read_text())
  assert rows["mixed"]["status"] == "finished"
  assert rows["mixed"]["test_perplexity"] == mixture["test"]["perplexity"]
  assert rows["mixed"]["valid_perplexity"] < rows["single"]["valid_perplexity"]
  assert rows["tagger"]["status"] == "finished" and rows["tagger"]["test_accuracy"] > 0
  markdown = (workdir / runner.RESULTS_MD).read_text()
  assert "| mixed | interpolation of none and single, weights 0.5, 0.5 | - | - |" in markdown
  assert "- `tagger`: POS tagging accuracy" in markdown
  assert "with the words outside the LM's vocabulary read as `<unk>` (" in markdown
  monkeypatch.setattr(runner.tagger_trainer, "train_tagger", tiny_config.must_not_run)
  monkeypatch.setattr(runner.ensemble, "interpolate", tiny_config.must_not_run)
  assert runner.run("mixed", workdir)["trained"] == []
  monkeypatch.setitem(tables.TABLES, "mixed", table(16))
  with pytest.raises(runner.ReproduceError, match="model.hidden_size is 8 there, 16 here"):
    runner.run("mixed", workdir)


def test_an_interpolation_is_stale_once_a_member_trains_again(demo, tmp_path, monkeypatch):
  monkeypatch.setitem(tables.TABLES, "mixed", tables.Table("mixed", (
      *tables.TABLES["demo"].rows,
      tables.Row("mixed", kind=tables.INTERPOLATE, members=("none", "single"),
                 weights=(0.5, 0.5)))))
  for row in tables.TABLES["demo"].rows:
    shutil.copytree(demo[0] / row.name, tmp_path / row.name)
  monkeypatch.setattr(train, "train_and_evaluate", tiny_config.must_not_run)
  assert runner.run("mixed", tmp_path)["trained"] == ["mixed"]
  mixed = tables.TABLES["mixed"].rows[-1]
  recorded = json.loads((tmp_path / "mixed" / row_status.INTERPOLATION_FILE).read_text())
  tests = {row.name: row_status.read(row, tmp_path)["test_perplexity"]
           for row in tables.TABLES["demo"].rows}
  assert recorded[row_status.MEMBER_LOGS] == tests
  assert row_status.read(mixed, tmp_path)["status"] == row_status.FINISHED
  log = tmp_path / "single" / logging_utils.METRICS_FILE    # as if trained again elsewhere
  records = _records(log)
  records[-1]["final_test_perplexity"] *= 1.001
  log.write_text("".join(json.dumps(record) + "\n" for record in records))
  assert row_status.read(mixed, tmp_path)["status"] == "stale: single trained again"
  assert runner.run("mixed", tmp_path, pages_only=True)["rows"]["mixed"] == (
      "stale: single trained again")
  assert "| mixed | interpolation of none and single, weights 0.5, 0.5 | - | stale: single " in (
      (tmp_path / runner.RESULTS_MD).read_text())
  assert runner.run("mixed", tmp_path)["trained"] == ["mixed"]   # mixed anew
  assert row_status.read(mixed, tmp_path)["status"] == row_status.FINISHED


def test_a_row_reading_weights_a_copied_log_lacks_is_refused_before_anything_trains(
    demo, tmp_path, monkeypatch):
  """As on a new machine whose finished rows came back from docs/results: the interpolation
  of `none` (its log alone) and `single` (not started) is refused at once, before `single`
  trains, not hours later when the mixture needs `none`'s weights."""
  monkeypatch.setitem(tables.TABLES, "mixed", tables.Table("mixed", (
      *tables.TABLES["demo"].rows,
      tables.Row("mixed", kind=tables.INTERPOLATE, members=("none", "single"),
                 weights=(0.5, 0.5)))))
  (tmp_path / "none").mkdir()              # the log alone, as docs/results/<table>/<row> keeps it
  for file in (checkpoints.CONFIG_FILE, logging_utils.METRICS_FILE):
    shutil.copy(demo[0] / "none" / file, tmp_path / "none")
  monkeypatch.setattr(train, "train_and_evaluate", tiny_config.must_not_run)
  monkeypatch.setattr(runner.ensemble, "interpolate", tiny_config.must_not_run)
  with pytest.raises(runner.ReproduceError) as error:
    runner.run("mixed", tmp_path)
  message = str(error.value)
  assert "\n" not in message
  assert (f"row mixed of table mixed reads the weights of row none, finished by its results "
          f"in {tmp_path / 'none'} but without its weights there") in message
  assert f"remove {tmp_path / 'none'} and run again" in message
  assert sorted(p.name for p in tmp_path.iterdir()) == ["none"]
  assert runner.run("mixed", tmp_path, pages_only=True)["trained"] == []  # pages need no weights
  shutil.copytree(demo[0] / "none", tmp_path / "none", dirs_exist_ok=True)  # its weights back
  shutil.copytree(demo[0] / "single", tmp_path / "single")
  (tmp_path / "single" / checkpoints.VOCAB_FILE).unlink()
  with pytest.raises(runner.ReproduceError, match="weights of row single"):
    runner.run("mixed", tmp_path)


def test_a_row_reading_a_tagger_without_its_parameters_is_refused(tmp_path, monkeypatch):
  monkeypatch.setitem(tables.TABLES, "tagged", tables.Table("tagged", (
      tables.Row("tagger", "tagger.py", kind=tables.TAGGER),
      tables.Row("lm", "das.py:model=das_lstmn,tags=1",
                 row_dirs={"data.tagger_dir": "tagger"}))))
  rows = tables.TABLES["tagged"].rows
  (tmp_path / "tagger").mkdir()     # a finished tagger's results, as docs/results keeps them
  (tmp_path / "tagger" / tagging.META_FILE).write_text(json.dumps(
      {"metrics": {"num_params": 10, "test_accuracy": 0.9}}))
  assert row_status.read(rows[0], tmp_path)["status"] == row_status.FINISHED
  with pytest.raises(runner.ReproduceError, match="reads the weights of row tagger"):
    runner.check_needed_weights("tagged", tmp_path, rows)
  (tmp_path / "tagger" / tagging.PARAMS_FILE).write_bytes(b"parameters")
  runner.check_needed_weights("tagged", tmp_path, rows)


def test_evaluating_a_copied_log_says_its_weights_are_missing(demo, tmp_path):
  for file in (checkpoints.CONFIG_FILE, logging_utils.METRICS_FILE):
    shutil.copy(demo[0] / "none" / file, tmp_path)
  with pytest.raises(checkpoints.CheckpointError,
                     match="holds a run's log but not its weights") as error:
    evaluate.load(tmp_path)
  assert "\n" not in str(error.value)


@pytest.mark.parametrize("table", sorted(p.parent.name for p in
                                          tiny_config.COMMITTED_RESULTS.glob("*/results.json")))
def test_committed_pages_are_what_the_runner_writes_from_the_committed_logs(
    table, tmp_path, monkeypatch):
  """docs/results/<table>: its own command with `--pages_only` (no corpus, no checkpoint,
  nothing trained) rewrites the committed rows (finished or still training) and Markdown
  table from the rows' config.json and metrics.jsonl alone."""
  committed = tiny_config.COMMITTED_RESULTS / table
  rewritten = tmp_path / "runs" / table
  shutil.copytree(committed, rewritten)
  monkeypatch.chdir(tmp_path)
  monkeypatch.setattr(train, "train_and_evaluate", tiny_config.must_not_run)
  logs = (logging_utils.METRICS_FILE, tagging.META_FILE, row_status.INTERPOLATION_FILE)
  assert any((committed / row.name / log).exists()
             for row in tables.TABLES[table].rows for log in logs)
  read = lambda d: json.loads((d / runner.RESULTS_JSON).read_text())
  flags = dict(arg[2:].split("=") for arg in read(committed)["command"].split()[3:])
  assert flags.pop("mode") == "reproduce" and flags.pop("table") == table
  summary = runner.run(table, flags.pop("workdir"), rows=flags.pop("rows", ""),
                          pages_only=True)
  assert not flags and summary["trained"] == []
  assert read(rewritten)["command"] == read(committed)["command"]
  assert read(rewritten)["rows"] == read(committed)["rows"]
  assert summary["rows"] == {row["name"]: row["status"] for row in read(committed)["rows"]}
  table_lines = lambda d: [l for l in (d / runner.RESULTS_MD).read_text().splitlines()
                           if l.startswith("|")]
  assert table_lines(rewritten) == table_lines(committed)


def test_epoch_differences_by_hand():
  rows = [{"name": "a", "valid_curve": [[1, 200.0], [2, 100.0]]},
          {"name": "b", "valid_curve": [[1, 202.0], [2, 99.0], [3, 90.0]]},
          {"name": "c", "valid_curve": []}]
  differences = table_page.epoch_differences(rows, "a")
  assert differences == {"b": [[1, 1.0], [2, -1.0]], "c": []}
  page = "\n".join(table_page._epoch_section(  # pylint: disable=protected-access
      {"reference": "a", "rows": rows, "epoch_differences": differences, "tolerance": 1.0}))
  assert "| 3 | - | 90.0 | - | - | - |" in page
  assert "- `b`: within 1% of `a`" in page and "- `c`: no epoch yet" in page
  page = "\n".join(table_page._epoch_section(  # pylint: disable=protected-access
      {"reference": "a", "rows": rows, "epoch_differences": differences, "tolerance": 0.5}))
  assert "- `b`: not within 0.5% of `a`" in page
  page = "\n".join(table_page._epoch_section(  # pylint: disable=protected-access
      {"reference": "a", "rows": rows, "epoch_differences": differences, "tolerance": None}))
  assert "| 2 | 100.0 | 99.0 | - | -1.00% | - |" in page and "within" not in page


@pytest.mark.parametrize("name", ["salton_ptb", "ptb_cpu"])
def test_the_attention_tables_compare_every_epoch_with_the_baseline(name):
  """Their pages (the runner's own, test_committed_pages_...) set each row's validation
  perplexity beside `none`'s, epoch by epoch, with no verdict."""
  committed = tiny_config.COMMITTED_RESULTS / name
  summary = json.loads((committed / runner.RESULTS_JSON).read_text())
  page = (committed / runner.RESULTS_MD).read_text()
  assert summary["reference"] == "none" and summary["tolerance"] is None
  curves = {r["name"]: dict(r["valid_curve"]) for r in summary["rows"]}
  proj, none = curves["proj"][1], curves["none"][1]
  assert f"| {100 * (proj - none) / none:+.2f}% |" in page
  assert "its difference to `none`:" in page and "within" not in page


def test_learning_rate_notes_by_hand():
  notes = table_page._learning_rate_notes  # pylint: disable=protected-access
  rows = [{"name": "a", "learning_rate": 1.0}, {"name": "b", "learning_rate": 1.0},
          {"name": "c", "learning_rate": 0.25}, {"name": "d"}]
  assert notes(rows) == [
      "- `c` starts at learning rate 0.25 (its config; the other rows at 1.0)."]
  assert notes(rows[:2] + rows[3:]) == []
  more = rows + [{"name": "e", "learning_rate": 0.25}, {"name": "f", "learning_rate": 0.5},
                 {"name": "g", "learning_rate": 1.0}]
  assert notes(more) == [
      "- `c` and `e` start at learning rate 0.25 (their configs; the other rows at 1.0).",
      "- `f` starts at learning rate 0.5 (its config; the other rows at 1.0)."]


def test_batching_notes_by_hand():
  notes = table_page._batching_notes  # pylint: disable=protected-access
  rows = [{"name": "a", "batches": "bucketed"}, {"name": "b", "batches": "random"},
          {"name": "c", "batches": None}, {"name": "d", "batches": "corpus_order"},
          {"name": "e", "batches": "bucketed"}, {"name": "f", "batches": "random"}]
  assert notes(rows) == ["- Training batches: `b` and `f` on batches of random sentences; `d` on "
                         "batches of consecutive sentences in corpus order; the other rows on "
                         "batches of sentences of similar length (docs/models.md)."]
  assert notes(rows[:3]) == ["- Training batches: `b` on batches of random sentences; the other "
                             "rows on batches of sentences of similar length (docs/models.md)."]
  assert notes(rows[1:3]) == [] and notes(rows[:1]) == []   # all alike: nothing to say


@pytest.mark.parametrize("overrides,kind", [
    ({}, "bucketed"), ({"data.bucket": False}, "random"),
    ({"data.bucket": False, "data.shuffle": False}, "corpus_order"),
    ({"data.span": "stream", "data.bucket": False}, "stream")])
def test_a_rows_batches_are_named_from_its_data_config(overrides, kind, tmp_path):
  row = tables.Row("x", "ptb.py:score=none", overrides)
  assert table_page.batch_kind(runner.row_config(row, tmp_path).data) == kind


def test_ran_on_notes_by_hand():
  """Each place names its rows with their times there; a running row with no epoch timed
  there yet (just resumed, or its epoch split with another place) says so; a finished row
  whose log gives no times is named bare."""
  notes = table_page._ran_on_notes  # pylint: disable=protected-access
  gpu, cpu = "gpu (H200), 1 device, 16 host CPUs", "cpu (EPYC), 1 device, 2 host CPUs"
  rows = [{"name": "a", "status": "finished", "ran_on": [gpu, cpu],
           "fastest_epoch_seconds": {gpu: 17.0, cpu: 400.0},
           "epoch_seconds": {gpu: 17.5, cpu: 410.0}},
          {"name": "b", "status": "running: epoch 4 of 22", "ran_on": [gpu, cpu],
           "fastest_epoch_seconds": {gpu: 16.0}, "epoch_seconds": {gpu: 16.5}},
          {"name": "c", "status": "finished", "ran_on": [cpu],
           "fastest_epoch_seconds": {}, "epoch_seconds": {}}]
  assert notes(rows)[:2] == [
      f"- Trained on {gpu}: `a` (17.0 s its fastest epoch, 17.5 s the median), `b` (16.0 s "
      "its fastest epoch, 16.5 s the median).",
      f"- Trained on {cpu}: `a` (400.0 s its fastest epoch, 410.0 s the median), `b` (no epoch "
      "timed there yet), `c`."]
  assert len(notes(rows)) == 3 and len(notes(rows[2:])) == 1   # the times' meaning if any


def test_code_note_by_hand():
  note = table_page._code_note  # pylint: disable=protected-access
  rows = [{"name": "a", "code_versions": ["abc123", "def456+changes"]},
          {"name": "b", "code_versions": []}, {"name": "c"},
          {"name": "d", "code_versions": ["abc123"]}]
  assert note(rows) == ["- Code that trained them (`code_version` in each log): `a` abc123, "
                        "def456+changes; `d` abc123."]
  assert note(rows[1:3]) == []


@pytest.mark.parametrize("name,lowered,note", [
    ("salton_ptb", ("average", "conv1x1", "average_in_sequence"),
     "`average`, `conv1x1` and `average_in_sequence` start at learning rate 0.5 (their configs; "
     "the other rows at 1.0)"),
    ("ptb_cpu", ("conv1x1",), "`conv1x1` starts at learning rate 0.5 (its config; the other "
                              "rows at 1.0)")])
def test_a_row_that_starts_at_another_learning_rate_says_so_on_its_page(name, lowered, note,
                                                                        tmp_path):
  """Its config lowers the table's first learning rate (docs/reproduce.md says why); the
  committed page (the runner's own, test_committed_pages_...) names the rows and their rate."""
  summary = json.loads((tiny_config.COMMITTED_RESULTS / name / runner.RESULTS_JSON)
                       .read_text())
  rates = {r["name"]: r["learning_rate"] for r in summary["rows"]}
  for row in lowered:
    config = runner.row_config(
        next(r for r in tables.TABLES[name].rows if r.name == row), tmp_path)
    assert rates.pop(row) == config.train.learning_rate == 0.5
  assert set(rates.values()) == {1.0}
  page = (tiny_config.COMMITTED_RESULTS / name / runner.RESULTS_MD).read_text()
  assert f"- {note}.\n" in page


def test_a_seed_row_is_its_row_with_another_seed_for_parameters_dropout_and_batches(tmp_path):
  rows = {row.name: row for row in tables.TABLES["salton_ptb"].rows}
  for name in ("none", "proj", "single"):
    base = runner.row_config(rows[name], tmp_path).to_dict()
    seeded = runner.row_config(rows[f"{name}_seed1"], tmp_path).to_dict()
    assert (seeded.pop("seed"), seeded["data"].pop("seed")) == (1, 1)
    assert (base.pop("seed"), base["data"].pop("seed")) == (0, 0)
    assert seeded == base and rows[f"{name}_seed1"].paper == rows[name].paper


def test_rows_sharing_one_run_across_tables_resolve_to_one_config(tmp_path):
  """The `das` rows whose run directory is a `das_recipe` row's, copied (docs/results/das):
  the same config, so that the runner accepts the copy; the LSTMN's first run, with the
  window's tapes, differs from the `das` row only in the tapes."""
  config = lambda table, name: checkpoints.as_json(runner.row_config(
      next(row for row in tables.TABLES[table].rows if row.name == name), tmp_path))
  for das_row, recipe_row in (("lstm", "stream_untied_plateau"),
                              ("lstm_seed1", "stream_untied_plateau_seed1"),
                              ("lstmn", "lstmn_tape2")):
    differences = checkpoints.config_differences(config("das", das_row),
                                                 config("das_recipe", recipe_row))
    assert differences == {}, das_row
  assert checkpoints.config_differences(
      config("das", "lstmn"), config("das_recipe", "lstmn_tape35")) == {"model.tape_slots": (0, 2)}


def test_pages_only_refuses_a_missing_workdir_and_writes_nothing(tmp_path):
  with pytest.raises(runner.ReproduceError, match="typo not found: --pages_only reads the rows"):
    runner.run("demo", tmp_path / "typo", pages_only=True)
  assert not (tmp_path / "typo").exists()
