"""Whether one row of a table ends below another, over every seed of each: the verdicts of a
table's page on its own questions ("does attention beat the baseline?"), with the seeds'
spread beside them, written from the committed results.json.

A row's seeds are the table's rows that repeat it with other seeds (`tables.base_row`: `X`,
`X_seed1`, ...). Over their test perplexities (the standard rule; the released code's rule
when a run of either row never predicts a sentence's first word, `every_token_predicted`
False, as the released code's network), row A is

  * lower than row B when max(A) < min(B): every seed of A ends below every seed of B;
  * higher when min(A) > max(B);
  * level when the two ranges overlap: the difference is within the seeds' own spread.

With fewer than `MIN_SEEDS` finished seeds of either row there is no verdict: one seed cannot
tell a difference of recipes from a difference of draws.
"""

from typing import Sequence

from attnlm_jax.experiments import markdown
from attnlm_jax.experiments import row_status
from attnlm_jax.experiments import tables

MIN_SEEDS = 2
HEADERS = ("row", "against", "row's seeds: test", "against's seeds: test",
           "difference of means", "verdict")


STANDARD_KEY, RELEASED_RULE_KEY = "test_perplexity", "test_perplexity_paper_convention"


def finished_seeds(table: dict) -> dict[str, list[dict]]:
  """Each row's finished seeds (itself and the rows that repeat it, `tables.base_row`), in
  table order: {row: runs}, the rows with one in the order of their first."""
  finished = {}
  for run in table["rows"]:
    if run["status"] == row_status.FINISHED:
      finished.setdefault(tables.base_row(run["name"]), []).append(run)
  return finished


def comparable_key(table: dict, rows: Sequence[str]) -> str:
  """The test perplexity that every finished seed of `rows` reports under one rule: the
  standard one, or the released code's where a run leaves the first words unpredicted."""
  finished = finished_seeds(table)
  runs = [run for row in rows for run in finished.get(row, [])]
  return (RELEASED_RULE_KEY if any(run.get("every_token_predicted") is False for run in runs)
          else STANDARD_KEY)


def seed_tests(table: dict, row: str, key: str = STANDARD_KEY) -> list[float]:
  """The test perplexities (`key`) of the finished seeds of `row` (itself included), in table
  order."""
  return [run[key] for run in finished_seeds(table).get(row, [])]


def verdict(row: Sequence[float], against: Sequence[float]) -> str:
  """"lower", "higher" or "level" (see the module docstring), with the seeds' count; what is
  missing while either row has fewer than MIN_SEEDS finished seeds."""
  if len(row) < MIN_SEEDS or len(against) < MIN_SEEDS:
    return (f"no verdict: seeds finished {len(row)} and {len(against)}, "
            f"{MIN_SEEDS} of each needed")
  seeds = f"({len(row)} and {len(against)} seeds)"
  if max(row) < min(against):
    return f"lower {seeds}"
  if min(row) > max(against):
    return f"higher {seeds}"
  return f"level within the seeds' spread {seeds}"


def _seeds_cell(tests: Sequence[float]) -> str:
  """"101.78, 101.95 (spread 0.17)": each seed's test perplexity and max - min."""
  if not tests:
    return "-"
  values = ", ".join(f"{test:.2f}" for test in tests)
  return values + (f" (spread {max(tests) - min(tests):.2f})" if len(tests) > 1 else "")


def _difference_cell(row: Sequence[float], against: Sequence[float]) -> str:
  if not row or not against:
    return "-"
  return f"{sum(row) / len(row) - sum(against) / len(against):+.2f}"


def seeds_table(table: dict, comparisons: Sequence[tuple[str, str]]) -> str:
  """The Markdown table of `comparisons`, pairs (row, against), from a table's results.json."""
  lines = []
  for row, against in comparisons:
    key = comparable_key(table, (row, against))
    row_tests, against_tests = seed_tests(table, row, key), seed_tests(table, against, key)
    rule = " (released rule)" if key == RELEASED_RULE_KEY else ""
    lines.append([f"`{row}`{rule}", f"`{against}`", _seeds_cell(row_tests),
                  _seeds_cell(against_tests),
                  _difference_cell(row_tests, against_tests), verdict(row_tests, against_tests)])
  return markdown.markdown_table(HEADERS, lines)
