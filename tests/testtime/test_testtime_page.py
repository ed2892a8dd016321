"""The page of a table (`--mode=testtime`): its rows' results, resuming part-way, the
choices at a grid's edge, the committed pages, and the command line's test-time flags."""

import itertools
import json
import re
import shutil

import dataclasses

import pytest

from attnlm_jax.common import errors
from attnlm_jax.evaluation import evaluate
from attnlm_jax.experiments import markdown
from attnlm_jax.experiments import runner
from attnlm_jax.experiments import tables
from attnlm_jax.experiments import testtime_page
from attnlm_jax.experiments import testtime_rows
from attnlm_jax.testtime import cache
from attnlm_jax.testtime import dynamic_eval
from attnlm_jax.testtime import grid_search
import tiny_config


def test_page_of_a_table(table_dir, monkeypatch):
  monkeypatch.setattr(cache, "THETAS", (0.0, 0.3))
  monkeypatch.setattr(cache, "LAMBDAS", (0.0, 0.1))
  monkeypatch.setattr(dynamic_eval, "GRIDS", {"sgd": {"learning_rate": (0.1,), "decay": (0.0,)},
                                              "rms": {"learning_rate": (1e-4,),
                                                      "decay": (0.01,)}})
  monkeypatch.setattr(dynamic_eval, "STAT_BATCHES", 2)
  summary = testtime_page.run("demo", table_dir, cache_size=100, dynamic_window=100)
  assert summary["evaluated"] == ["none"]
  assert summary["rows"] == {"none": "finished", "single": "not started"}
  page = json.loads((table_dir / testtime_page.PAGE_JSON).read_text())
  none = page["rows"][0]["results"]
  assert {"cache", "dynamic_sgd", "dynamic_rms"} <= none.keys()
  assert none["cache"]["split"] == "test" and none["cache"]["cache_size"] == 100
  assert none["dynamic_sgd"]["model_perplexity"] == pytest.approx(
      page["rows"][0]["test_perplexity"], rel=1e-5)
  text = (table_dir / testtime_page.PAGE_MD).read_text()
  assert "| none |" in text and "| single | - / - | not started |" in text
  assert "--mode=testtime --table=demo" in text and "--grid_extensions=3" in text
  assert "MS_g averages over (docs/testtime.md): `none` 2." in text   # STAT_BATCHES
  assert ("| GluonNLP, cache_language_model | standard_lstm_lm_650 (2 x 650, tied) | "
          "WikiText-2 | 93.9 | 67.31 | - | 2,000 words, theta 0.662, lambda 0.1279 |") in text
  assert "| AWD-LSTM | Penn Treebank | 57.3 | 52.8 | 51.1 | - |" in text
  assert len(page["anchors"]) == len(testtime_page.ANCHORS)
  assert page["grid_extensions"] == none["grid_extensions"] == grid_search.EXTENSIONS
  assert testtime_page.run("demo", table_dir, cache_size=100,
                      dynamic_window=100)["evaluated"] == []        # reused
  row_file = table_dir / "none" / testtime_rows.ROW_FILE
  row_file.write_text(json.dumps({**json.loads(row_file.read_text()), "step": 1}))
  assert testtime_page.run("demo", table_dir, cache_size=100,
                      dynamic_window=100)["evaluated"] == ["none"]  # another checkpoint
  monkeypatch.setattr(cache, "LAMBDAS", (0.0, 0.2))                 # another grid
  assert testtime_page.run("demo", table_dir, cache_size=100,
                      dynamic_window=100)["evaluated"] == ["none"]
  again = json.loads((table_dir / testtime_page.PAGE_JSON).read_text())["rows"][0]["results"]
  assert [p["lambda"] for p in again["cache"]["grid"][:4]] == [0.0, 0.2, 0.0, 0.2]
  # Other flags are refused while the row keeps results made with these; without them, the
  # row is evaluated with the others.
  with pytest.raises(errors.UserError) as refused:
    testtime_page.run("demo", table_dir, cache_size=100, dynamic_window=100, grid_extensions=0)
  assert str(refused.value) == (
      f"{row_file} was made with --cache=100 --dynamic_window=100 --grid_extensions=3, not "
      "--cache=100 --dynamic_window=100 --grid_extensions=0: give those flags to go on with "
      "this page, or delete the file to evaluate the row with these")
  row_file.unlink()
  assert testtime_page.run("demo", table_dir, cache_size=100, dynamic_window=100,
                      grid_extensions=0)["evaluated"] == ["none"]   # the grid alone
  alone = json.loads((table_dir / testtime_page.PAGE_JSON).read_text())["rows"][0]["results"]
  assert "grid_extensions" not in alone and len(alone["cache"]["grid"]) == 4



def test_a_row_that_never_predicts_a_first_word_is_not_applicable(tmp_path, monkeypatch):
  """A finished row trained without a start symbol (the released code's rows) is listed as
  not applicable, its own perplexity as n/a under the standard rule (it leaves out the first
  words) and as logged under the released rule, and the table's page is written (the methods
  would refuse it)."""
  demo = tables.TABLES["demo"]
  released_rule = tables.Row("none", "demo.py:score=none",
                             {**demo.rows[0].overrides, "data.start_symbol": False})
  monkeypatch.setitem(tables.TABLES, "demo", dataclasses.replace(demo, rows=(released_rule,)))
  monkeypatch.setattr(testtime_rows, "row_results", tiny_config.must_not_run)
  (tmp_path / "none").mkdir()
  shutil.copy(tiny_config.COMMITTED_RESULTS / "ptb_cpu" / "none" / "metrics.jsonl",
              tmp_path / "none")                                 # a finished row's log
  summary = testtime_page.run("demo", tmp_path)
  assert summary["evaluated"] == [] and summary["rows"] == {"none": "finished"}
  text = (tmp_path / testtime_page.PAGE_MD).read_text()
  every_token, released_rule = text.split("the released code's rule", 1)
  assert "| none | n/a / n/a | not applicable | not applicable | not applicable |" in every_token
  assert re.search(r"\| none \| \d+\.\d / \d+\.\d \| not applicable \|", released_rule)

def test_a_rows_cache_over_the_output_layers_states_is_shown_beside_the_page(
    table_dir, tmp_path, monkeypatch):
  monkeypatch.setattr(cache, "THETAS", (0.0, 0.3))
  monkeypatch.setattr(cache, "LAMBDAS", (0.0, 0.1))
  shutil.copytree(table_dir, tmp_path, dirs_exist_ok=True,
                  ignore=shutil.ignore_patterns("testtime*"))
  head = cache.evaluate_split(evaluate.load(tmp_path / "none"), "test", 100, extensions=0,
                              states="head")
  (tmp_path / "none" / testtime_rows.HEAD_CACHE_FILE).write_text(json.dumps(head))
  monkeypatch.setattr(testtime_rows, "row_results", tiny_config.must_not_run)
  testtime_page.run("demo", tmp_path, rows=["single"], cache_size=100, dynamic_window=100)
  row = json.loads((tmp_path / testtime_page.PAGE_JSON).read_text())["rows"][0]
  best = min(head["grid"], key=lambda point: point["perplexity"])
  assert row["cache_head"]["valid_perplexity"] == best["perplexity"]
  assert row["cache_head"]["perplexity"] == head["perplexity"] and "grid" not in row["cache_head"]
  text = (tmp_path / testtime_page.PAGE_MD).read_text()
  number = markdown.format_number
  assert (f"| none | 100 | {number(best['perplexity'])} / {number(head['perplexity'])} | "
          f"{number(best['perplexity_paper_convention'])} / "
          f"{number(head['perplexity_paper_convention'])} | {head['cache_theta']:g}, "
          f"{head['cache_lambda']:g} |") in text.splitlines()
  (tmp_path / "none" / testtime_rows.HEAD_CACHE_FILE).write_text(json.dumps({**head,
                                                                        "cache_states": "lstm"}))
  result = tiny_config.run_main("--mode=testtime", "--table=demo", f"--workdir={tmp_path}",
                                "--rows=single", check=False)
  assert result.returncode == 1
  assert result.stderr.strip().splitlines() == [
      f"error: {tmp_path / 'none' / testtime_rows.HEAD_CACHE_FILE} is not a cache over the output "
      "layer's h'_t: make it with --mode=evaluate --split=test --cache=SIZE "
      "--cache_states=head"]


class Stopped(Exception):
  """A stand-in for the end of a session."""


def test_a_row_stopped_part_way_goes_on_from_its_last_pass(table_dir, tmp_path, monkeypatch):
  monkeypatch.setattr(cache, "THETAS", (0.0, 0.3))
  monkeypatch.setattr(cache, "LAMBDAS", (0.0, 0.1))
  monkeypatch.setattr(dynamic_eval, "GRIDS", {"sgd": {"learning_rate": (0.1, 0.3), "decay": (0.0,)},
                                              "rms": {"learning_rate": (1e-4,),
                                                      "decay": (0.01,)}})
  monkeypatch.setattr(dynamic_eval, "STAT_BATCHES", 2)
  for name in ("stopped", "whole"):
    shutil.copytree(table_dir / "none", tmp_path / name / "none",
                    ignore=shutil.ignore_patterns("testtime*"))
  made, stop_at, make_pass = [], [3], dynamic_eval.DynamicEvaluator.split_log_probs

  def counted(self, split, rule=None, *args):
    made.append(split)
    if len(made) == stop_at[0]:
      raise Stopped
    return make_pass(self, split, rule, *args)

  monkeypatch.setattr(dynamic_eval.DynamicEvaluator, "split_log_probs", counted)
  run = lambda name, size=100: testtime_page.run("demo", tmp_path / name, cache_size=size,
                                             dynamic_window=100, grid_extensions=0)
  with pytest.raises(Stopped):  # in SGD's pass over test, after its two over valid
    run("stopped")
  progress = tmp_path / "stopped" / "none" / testtime_rows.PROGRESS_FILE
  entries = json.loads(progress.read_text())["entries"]
  assert sorted(entries) == ["cache", "valid dynamic_sgd lr 0.1 decay 0.0",
                             "valid dynamic_sgd lr 0.3 decay 0.0"]
  # The page, written while the row is evaluated elsewhere, shows what it has made so far.
  assert testtime_page.run("demo", tmp_path / "stopped", rows=["single"], cache_size=100,
                      dynamic_window=100, grid_extensions=0)["evaluated"] == []
  row = json.loads((tmp_path / "stopped" / testtime_page.PAGE_JSON).read_text())["rows"][0]
  assert row["results"] is None and row["in_progress"]["passes"] == 2
  cached = row["in_progress"]["cache"]
  assert cached == entries["cache"]
  valid = min(point["perplexity"] for point in cached["grid"])
  lines = (tmp_path / "stopped" / testtime_page.PAGE_MD).read_text().splitlines()
  assert (f"| none | {markdown.format_number(row['valid_perplexity'])} / "
          f"{markdown.format_number(row['test_perplexity'])} | "
          f"{markdown.format_number(valid)} / {markdown.format_number(cached['perplexity'])} | "
          "evaluating (2 passes made) | evaluating (2 passes made) |") in lines
  assert f"| none | {cached['cache_theta']:g}, {cached['cache_lambda']:g} | - | - |" in lines
  # Made from another checkpoint, or another RMS statistic, the evaluation would start
  # afresh: the page shows nothing in progress.
  saved = progress.read_text()
  for key, value in (("step", -1), ("stat_batches", 3)):
    other = json.loads(saved)
    other["made_with"][key] = value
    progress.write_text(json.dumps(other))
    testtime_page.run("demo", tmp_path / "stopped", rows=["single"], cache_size=100,
                      dynamic_window=100, grid_extensions=0)
    row = json.loads((tmp_path / "stopped" / testtime_page.PAGE_JSON).read_text())["rows"][0]
    assert row.get("in_progress") is None, key
  progress.write_text(saved)
  made.clear()
  stop_at[0] = 0
  run("stopped")
  # The four passes left: SGD's over test and the static one (made once for both rules),
  # then RMS's over valid and over test.
  assert made == ["test", "test", "valid", "test"]
  assert not progress.exists()
  made.clear()
  run("whole")
  assert len(made) == 6
  row_file = lambda name: json.loads(
      (tmp_path / name / "none" / testtime_rows.ROW_FILE).read_text())
  assert row_file("stopped") == row_file("whole")
  whole = tmp_path / "whole" / "none"
  (whole / testtime_rows.ROW_FILE).unlink()
  made.clear()
  stop_at[0] = 2
  with pytest.raises(Stopped):
    run("whole", size=50)
  made.clear()
  stop_at[0] = 0
  with pytest.raises(errors.UserError, match=(   # progress made with another cache size
      f"^{re.escape(str(whole / testtime_rows.PROGRESS_FILE))} was made with --cache=50 ")):
    run("whole", size=60)
  progress = whole / testtime_rows.PROGRESS_FILE
  assert made == [] and len(json.loads(progress.read_text())["entries"]) == 2   # kept
  assert testtime_rows.in_progress(whole, 50, 100, 0)["passes"] == 1   # it goes on with its
  assert testtime_rows.in_progress(whole, 60, 100, 0) is None          # flags, not others
  # Made from another checkpoint, the progress is made again whatever the flags: no refusal.
  stale = json.loads(progress.read_text())
  stale["made_with"]["step"] = -1
  progress.write_text(json.dumps(stale))
  run("whole", size=60)
  assert len(made) == 6
  (whole / testtime_rows.ROW_FILE).unlink()
  made.clear()
  stop_at[0] = 2
  monkeypatch.setattr(dynamic_eval, "STAT_BATCHES", 3)
  with pytest.raises(Stopped):
    run("whole", size=70)
  made.clear()
  stop_at[0] = 0
  monkeypatch.setattr(dynamic_eval, "STAT_BATCHES", 2)
  run("whole", size=70)   # nor progress made with another MS_g
  assert len(made) == 6


def test_choices_at_the_edges_of_the_values_searched_are_named():
  grids = {"cache": {"theta": [0.0, 0.5, 1.0], "lambda": [0.0, 0.1, 0.2]},
           "dynamic_sgd": {"learning_rate": [0.1, 1.0], "decay": [0.0, 0.1]},
           "dynamic_rms": {"learning_rate": [1e-4, 1e-3], "decay": [0.01]}}

  def searched(method, **past):
    """The grid's points and the points past its edges (one axis changed each)."""
    axes = grids[method]
    points = [dict(zip(axes, values)) for values in itertools.product(*axes.values())]
    return points + [{**points[0], axis: value} for axis, value in past.items()]

  chosen = {"grids": grids,
            "cache": {"cache_theta": 1.4, "cache_lambda": 0.0,
                      "grid": searched("cache", theta=1.4)},
            "dynamic_sgd": {"learning_rate": 0.1, "decay": 0.0,
                            "grid": searched("dynamic_sgd", learning_rate=0.033)},
            "dynamic_rms": {"learning_rate": 1e-4, "decay": 0.01,
                            "grid": searched("dynamic_rms")}}
  # theta at the top of the values searched (the grid and 1.4 past it); SGD's 0.1 is inside
  # them (0.033 was searched); lambda 0 and decay 0 are bounds, not edges; a one-point grid
  # has none.
  assert testtime_page.edge_choices(chosen) == ["cache theta 1.4, the largest of 0, 0.5, 1, 1.4",
                                           "RMS learning rate 0.0001, the smallest of "
                                           "0.0001, 0.001"]
  page = {"table": "demo", "title": "t", "command": "c", "date": "d", "cache_size": 2000,
          "rows": [{"name": "none", "status": "finished", "results": None},
                   {"name": "single", "status": "finished", "results": chosen}]}
  assert testtime_page._edge_notes(page["rows"]) == [
      "Chosen at an edge of the values searched (the best point may lie beyond it):", "",
      "- `single`: cache theta 1.4, the largest of 0, 0.5, 1, 1.4; RMS learning rate 0.0001, "
      "the smallest of 0.0001, 0.001.", ""]


def test_cli_evaluate_with_a_cache_and_with_dynamic_evaluation(table_dir):
  workdir = table_dir / "none"
  result = tiny_config.run_main("--mode=evaluate", f"--workdir={workdir}", "--split=test",
                                "--cache=100", "--cache_theta=0.3", "--cache_lambda=0.1",
                                check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  cached = json.loads(result.stdout.splitlines()[-1])
  assert (cached["method"], cached["cache_theta"], cached["cache_lambda"]) == ("cache", 0.3,
                                                                              0.1)
  assert {"perplexity", "perplexity_paper_convention", "model_perplexity",
          "model_perplexity_paper_convention"} <= cached.keys()
  result = tiny_config.run_main("--mode=evaluate", f"--workdir={workdir}", "--split=test",
                                "--cache=100", "--cache_theta=0.3", "--cache_lambda=0.1",
                                "--cache_states=head", check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  over_head = json.loads(result.stdout.splitlines()[-1])      # `none`: h'_t = h_t
  assert (over_head["cache_states"], cached["cache_states"]) == ("head", "lstm")
  assert over_head["perplexity"] == cached["perplexity"]
  result = tiny_config.run_main("--mode=evaluate", f"--workdir={workdir}", "--split=test",
                                "--dynamic=sgd", "--dynamic_lr=0.1", "--dynamic_decay=0",
                                "--dynamic_window=100", check=False)
  assert result.returncode == 0, result.stderr[-2000:]
  dynamic = json.loads(result.stdout.splitlines()[-1])
  assert dynamic["method"] == "dynamic_sgd" and dynamic["learning_rate"] == 0.1
  assert dynamic["model_perplexity"] == pytest.approx(cached["model_perplexity"], rel=1e-5)
  # The command line prints what the libraries compute with the same settings.
  model = evaluate.load(workdir)
  library_cache = cache.evaluate_split(model, "test", 100, theta=0.3, lam=0.1)
  library_dynamic = dynamic_eval.evaluate_split(model, "test", "sgd", learning_rate=0.1,
                                                decay=0.0, window=100)
  for printed, computed in ((cached, library_cache), (dynamic, library_dynamic)):
    for key in ("perplexity", "perplexity_paper_convention", "model_perplexity"):
      assert printed[key] == pytest.approx(computed[key], rel=1e-6), key
  assert cached["perplexity"] != cached["model_perplexity"]
  assert dynamic["perplexity"] != dynamic["model_perplexity"]


def test_cli_refuses_the_cache_with_dynamic_evaluation(table_dir):
  result = tiny_config.run_main("--mode=evaluate", f"--workdir={table_dir / 'none'}", "--cache=10",
                                "--dynamic=sgd", check=False)
  assert result.returncode == 1
  assert result.stderr.strip().splitlines() == [
      "error: --cache and --dynamic are two methods: give one of them"]


@pytest.mark.parametrize("table", sorted(
    p.parent.name for p in tiny_config.COMMITTED_RESULTS.glob(f"*/{testtime_page.PAGE_JSON}")))
def test_committed_testtime_pages_are_what_the_command_writes_from_the_committed_files(
    table, tmp_path, monkeypatch):
  """docs/results/<table>/testtime.md: rewritten from the rows' logs and their saved
  `testtime.json` files alone (`testtime_rows.ROW_FILE`, no checkpoint), the command gives the
  committed rows and tables; and each saved result was computed on the row's own trained
  model (its cache without weight, lambda = 0, gives the row's valid perplexity, and the model
  alone its test perplexity)."""
  committed = tiny_config.COMMITTED_RESULTS / table
  rewritten = tmp_path / "runs" / table
  shutil.copytree(committed, rewritten)
  monkeypatch.chdir(tmp_path)
  monkeypatch.setattr(testtime_rows, "row_results", tiny_config.must_not_run)
  page = json.loads((committed / testtime_page.PAGE_JSON).read_text())
  rows = re.search(r"--rows=(\S+)", page["command"])
  testtime_page.run(table, rewritten, rows=rows.group(1) if rows else (),
               cache_size=page["cache_size"], dynamic_window=page["dynamic_window"],
               grid_extensions=page["grid_extensions"])
  again = json.loads((rewritten / testtime_page.PAGE_JSON).read_text())
  assert again["command"] == page["command"]
  assert again["rows"] == page["rows"]
  table_lines = lambda d: [l for l in (d / testtime_page.PAGE_MD).read_text().splitlines()
                           if l.startswith("|")]
  assert table_lines(rewritten) == table_lines(committed)
  evaluated = [r for r in page["rows"] if r["results"] is not None]
  assert evaluated
  for row in evaluated:
    cached = row["results"]["cache"]
    assert cached["model_perplexity"] == pytest.approx(row["test_perplexity"], rel=1e-4)
    no_cache = [p["perplexity"] for p in cached["grid"] if p["lambda"] == 0.0]
    assert no_cache and no_cache[0] == pytest.approx(row["valid_perplexity"], rel=1e-4)


def test_a_missing_workdir_is_refused_and_nothing_is_written(tmp_path):
  with pytest.raises(runner.ReproduceError, match="typo not found: --mode=testtime reads the "
                     "rows that --mode=reproduce --table=demo --workdir=DIR trained"):
    testtime_page.run("demo", tmp_path / "typo")
  assert not (tmp_path / "typo").exists()
