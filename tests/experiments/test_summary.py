"""The README's tables: written from the committed results files, and verdicts that carry their
seeds."""

import json
import shutil

import pytest

from attnlm_jax.common import checkout
from attnlm_jax.experiments import findings
from attnlm_jax.experiments import printed
from attnlm_jax.experiments import row_status
from attnlm_jax.experiments import summary
from attnlm_jax.experiments import table_page
from attnlm_jax.experiments import tables
import tiny_config


def test_every_readme_table_is_what_the_committed_results_files_give():
  """Each cell of the README's and the table pages' tables equals its file's value: the
  command that writes them from the files would change nothing."""
  stale = summary.update(tiny_config.REPO, check=True)
  assert not stale, (f"{', '.join(map(str, stale))} out of date: run python -m "
                     "attnlm_jax.experiments.summary")


def test_the_readme_results_table_has_a_line_for_every_finished_row_and_the_page_for_all():
  """The README lists each committed table's rows with a finished seed, once each under the
  first finished run of the row its seeds repeat (the row itself, or its first finished seed
  while the row trains); the table's own page lists every row, running and not started too."""
  readme = (tiny_config.REPO / "README.md").read_text()
  block = readme.split("<!-- BEGIN results_table -->", 1)[1].split("<!-- END", 1)[0]
  for path in sorted(tiny_config.COMMITTED_RESULTS.glob("*/results.json")):
    table = json.loads(path.read_text())
    page = (path.parent / "README.md").read_text()
    line = f"| [{table['table']}](docs/results/{table['table']}/README.md) | "
    first_finished = {}  # base row -> the name its README line goes under
    for row in table["rows"]:
      if row["status"] == row_status.FINISHED:
        first_finished.setdefault(tables.base_row(row["name"]), row["name"])
    for row in table["rows"]:
      listed = block.count(f"{line}[{row['name']}](") + block.count(f"{line}{row['name']} | ")
      assert listed == (row["name"] in first_finished.values()), row["name"]
      assert f"[{row['name']}](" in page or f" | {row['name']} | " in page, row["name"]


def test_the_readme_folds_a_rows_seeds_into_one_line_and_leaves_out_rows_in_training(
    tmp_path):
  (tmp_path / "single").mkdir()
  lines = summary.finished_rows(_table([
      _row("single", "finished", 5.0, test=94.0), _row("none", "finished", None, test=87.0),
      _row("single_seed1", "finished", 1.0, test=91.0),
      _row("single_seed2", "running: epoch 3 of 22"), _row("proj", "running: epoch 1 of 22"),
      _row("combined_seed1", "finished", -3.0, test=68.0)]), ".", tmp_path)
  assert [line[1:4] for line in lines] == [["[single](./single/)", "94.0, 91.0", "74.0, 71.0"],
                                           ["none", "87.0", "67.0"],
                                           ["combined_seed1", "68.0", "48.0"]]
  assert lines[0][5:] == ["+3.5 (+5.0%), +0.7 (+1.0%)", "seeds disagree (2 seeds)"]
  assert lines[2][5:] == ["-2.1 (-3.0%)", "lower, 1 seed"]


@pytest.mark.parametrize("percents,expected", [
    ([1.9, -2.0], "reproduces (2 seeds)"),
    ([5.2, 2.1], "misses (2 seeds)"),
    ([-3.0, -2.5, -9.0], "beats (3 seeds)"),
    ([5.2, 1.0], "seeds disagree (2 seeds)"),
    ([5.2], "higher, 1 seed"),
    ([-1.0], "within 2%, 1 seed"),
    ([-2.01], "lower, 1 seed"),
    ([], "-"),
])
def test_a_verdict_needs_every_seed_on_one_side_of_the_tolerance(percents, expected):
  assert printed.verdict(percents) == expected


def _table(rows):
  return {"table": "t", "rows": rows}


def _row(name, status, percent=None, test=90.0):
  paper = {"test": 70.0, "convention": printed.RELEASED_CODE_RULE}
  differences = {"test": {"difference": percent * 0.7, "percent": percent}} if percent else None
  return {"name": name, "status": status, "test_perplexity": test,
          "test_perplexity_paper_convention": test - 20, "paper": paper,
          "differences": differences}


def test_seed_rows_share_the_verdict_of_their_row_and_a_running_one_says_so(tmp_path):
  (tmp_path / "single").mkdir()
  lines = summary.results_rows(_table([
      _row("single", "finished", 5.0), _row("single_seed1", "finished", 1.0),
      _row("single_seed2", "running: epoch 3 of 22")]), ".", tmp_path)
  assert [line[-1] for line in lines] == ["seeds disagree (2 seeds)"] * 2 + [
      "running: epoch 3 of 22"]
  assert lines[0][1] == "[single](./single/)" and lines[1][1] == "single_seed1"
  assert lines[0][4] == "70.0 (released rule)" and lines[0][5] == "+3.5 (+5.0%)"


def test_a_finished_tagger_row_gives_its_accuracy_and_a_row_without_a_paper_says_so(
    tmp_path):
  tagger = {"name": "tagger", "status": "finished", "paper": None, "test_accuracy": 0.94809}
  plain = {**_row("none", "finished"), "paper": None}
  lines = summary.results_rows(_table([tagger, plain]), ".", tmp_path)
  assert [line[-1] for line in lines] == ["tagging accuracy 94.8%", "no printed row"]


def test_a_row_that_never_predicts_a_first_word_has_no_standard_number(tmp_path):
  """A row trained without a start symbol: "n/a" under the standard rule in the README's
  table and in results.md, its released-rule number as it is, and no epoch-by-epoch
  comparison with the reference row."""
  released = {**_row("released", "finished", 1.0, test=80.0), "every_token_predicted": False}
  plain = {**_row("none", "finished", 2.0, test=87.0), "every_token_predicted": True}
  lines = summary.results_rows(_table([plain, released]), ".", tmp_path)
  assert [line[2:4] for line in lines] == [["87.0", "67.0"], ["n/a", "60.0"]]
  for row, curve in ((plain, [[1, 200.0], [2, 150.0]]), (released, [[1, 180.0], [2, 120.0]])):
    row.update(kind="train", model="m", params=1, num_epochs=2, epochs_run=2, best_epoch=2,
               valid_perplexity=curve[-1][1], valid_perplexity_paper_convention=100.0,
               valid_curve=curve, best_valid_perplexity=curve[-1][1],
               paper={**row["paper"], "valid": 72.0, "paper": "a paper"}, ran_on=[],
               code_versions=[], learning_rate=1.0, batches=None, last_epoch_seconds=None,
               epoch_seconds={}, fastest_epoch_seconds={})
  assert table_page.epoch_differences([plain, released], "none") == {}
  page = table_page.format_markdown({"table": "t", "title": "t", "date": "d", "command": "c",
                                     "rows": [plain, released], "reference": "none",
                                     "tolerance": None, "epoch_differences": {}})
  cells = next(line for line in page.splitlines() if line.startswith("| released |")).split("|")
  assert [c.strip() for c in cells[5:9]] == ["n/a", "n/a", "100.0", "60.0"]
  assert "`released` trained without a start symbol" in page


def test_a_page_without_its_table_lines_is_refused_by_name():
  with pytest.raises(ValueError, match="no <!-- BEGIN results_table -->"):
    summary.replace_block("# a page\n", "results_table", "| a |")
  page = "a\n<!-- BEGIN x -->\nold\n<!-- END x -->\nb\n"
  assert summary.replace_block(page, "x", "new") == "a\n<!-- BEGIN x -->\nnew\n<!-- END x -->\nb\n"


def test_the_command_rewrites_a_stale_table_and_check_names_it(tmp_path, monkeypatch, capsys):
  for part in ("README.md", "docs/results", "benchmarks/results"):
    source, target = tiny_config.REPO / part, tmp_path / part
    target.parent.mkdir(parents=True, exist_ok=True)
    (shutil.copytree if source.is_dir() else shutil.copy)(source, target)
  readme = tmp_path / "README.md"
  readme.write_text(summary.replace_block(readme.read_text(), "testtime_table", "stale"))
  monkeypatch.setattr(checkout, "REPOSITORY", tmp_path)
  assert summary.main(["summary", "--check"]) == 1
  assert "README.md: out of date" in capsys.readouterr().err
  assert summary.main(["summary"]) == 0
  assert summary.main(["summary", "--check"]) == 0
  assert "stale" not in readme.read_text()


def test_the_findings_set_each_printed_row_beside_every_column_with_its_seeds():
  rows = [_row("single", "finished", 5.0, test=94.0), _row("single_seed1", "finished", 3.0),
          {**_row("released", "finished", 1.0, test=80.0), "every_token_predicted": False},
          {**_row("released_seed1", "finished", 1.0, test=80.0), "every_token_predicted": False},
          _row("released_attention", "running: epoch 3 of 23"),
          _row("none", "finished", None, test=87.0), _row("none_seed1", "not started")]
  for row, released_rule in zip(rows, (73.5, 72.1, 70.7, 71.2, None, 68.3, None)):
    row["test_perplexity_paper_convention"] = released_rule
  table = findings.findings_table({"table": "salton_ptb", "rows": rows})
  single = next(line for line in table.splitlines() if line.startswith("| `single`"))
  cells = [cell.strip() for cell in single.strip("|").split("|")]
  assert cells[1] == "70.1"                                  # the printed test number
  # Both seeds under both rules, each with its spread (max - min).
  assert cells[2] == "73.5, 72.1 (spread 1.40) / 94.0, 90.0 (spread 4.00)"
  # The released network never predicts a first word: no standard-rule number, no spread.
  assert cells[3] == "70.7, 71.2 (spread 0.50) / n/a, n/a"
  assert cells[4] == "running: epoch 3 of 23"
  assert cells[5] == "68.3 / 87.0"
  assert "paper's recipe here: misses (2 seeds)" in cells[6]
  assert "released network here: reproduces (2 seeds)" in cells[6]
  combined = next(line for line in table.splitlines() if line.startswith("| `combined`"))
  assert "| - |" in combined          # no released_attention row for the combined score
