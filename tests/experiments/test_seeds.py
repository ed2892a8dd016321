"""The verdicts between two rows over every seed of each (attnlm_jax/experiments/seeds.py)."""

import pytest

from attnlm_jax.experiments import row_status
from attnlm_jax.experiments import seeds


@pytest.mark.parametrize("row,against,expected", [
    ([101.8, 101.9], [102.0, 102.4], "lower (2 and 2 seeds)"),
    ([102.7, 103.1], [101.78, 102.2], "higher (2 and 2 seeds)"),
    ([101.8, 102.5], [102.0, 102.4], "level within the seeds' spread (2 and 2 seeds)"),
    ([101.0, 102.0], [102.0, 103.0], "level within the seeds' spread (2 and 2 seeds)"),
    ([101.0, 101.2, 101.1], [101.3, 104.0], "lower (3 and 2 seeds)"),
    ([101.8], [102.0, 102.4], "no verdict: seeds finished 1 and 2, 2 of each needed"),
    ([], [], "no verdict: seeds finished 0 and 0, 2 of each needed"),
])
def test_a_verdict_needs_two_seeds_of_each_and_every_seed_on_one_side(row, against, expected):
  assert seeds.verdict(row, against) == expected


def _run(name, test, status=row_status.FINISHED):
  return {"name": name, "status": status, "test_perplexity": test}


TABLE = {"table": "t", "rows": [
    _run("none", 101.78), _run("single", 105.9), _run("single_head_lr0.1", 102.75),
    _run("none_seed1", 102.10), _run("single_head_lr0.1_seed1", 103.05),
    _run("single_seed1", None, status="running: epoch 3 of 16")]}


def test_a_rows_seeds_are_its_finished_seed_rows_and_not_rows_that_share_its_prefix():
  assert seeds.seed_tests(TABLE, "single") == [105.9]  # not single_head_lr0.1, not running
  assert seeds.seed_tests(TABLE, "single_head_lr0.1") == [102.75, 103.05]
  assert seeds.seed_tests(TABLE, "none") == [101.78, 102.10]


def test_the_table_gives_each_seed_its_spread_the_difference_of_means_and_the_verdict():
  table = seeds.seeds_table(TABLE, [("single_head_lr0.1", "none"), ("single", "none")])
  lines = table.splitlines()
  assert lines[0] == ("| row | against | row's seeds: test | against's seeds: test | "
                      "difference of means | verdict |")
  # Means 102.90 and 101.94: +0.96; ranges [102.75, 103.05] and [101.78, 102.10] apart.
  assert lines[2] == ("| `single_head_lr0.1` | `none` | 102.75, 103.05 (spread 0.30) | "
                      "101.78, 102.10 (spread 0.32) | +0.96 | higher (2 and 2 seeds) |")
  assert lines[3] == ("| `single` | `none` | 105.90 | 101.78, 102.10 (spread 0.32) | +3.96 | "
                      "no verdict: seeds finished 1 and 2, 2 of each needed |")


def test_rows_that_leave_the_first_words_unpredicted_compare_under_the_released_rule():
  released = lambda name, test, rule: {**_run(name, test), "every_token_predicted": False,
                                       "test_perplexity_paper_convention": rule}
  table = {"table": "t", "rows": [
      released("released", 87.88, 71.64), released("released_attention", 86.74, 70.76),
      released("released_attention_seed1", 87.00, 70.96),
      {**_run("none", 87.44), "test_perplexity_paper_convention": 68.34}]}
  assert seeds.comparable_key(table, ("released_attention", "released")) == (
      "test_perplexity_paper_convention")
  assert seeds.comparable_key(table, ("none",)) == "test_perplexity"
  lines = seeds.seeds_table(table, [("released_attention", "released"), ("none", "none")])
  assert lines.splitlines()[2] == (
      "| `released_attention` (released rule) | `released` | 70.76, 70.96 (spread 0.20) | 71.64 "
      "| -0.78 | no verdict: seeds finished 2 and 1, 2 of each needed |")
  assert lines.splitlines()[3].startswith("| `none` | `none` | 87.44 | 87.44 | +0.00 |")
