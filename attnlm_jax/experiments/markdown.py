"""Markdown for the pages: table cells and tables."""

import math
from typing import Optional, Sequence


NOT_APPLICABLE = "n/a"  # A number a row cannot have (`standard_perplexity`).


def format_number(value) -> str:
  """A table cell: "-" for None, floats (perplexities) to one decimal ("diverged" for one
  that is not finite), anything else as is."""
  if value is None:
    return "-"
  if isinstance(value, float):
    return f"{value:.1f}" if math.isfinite(value) else "diverged"
  return str(value)


def count(value: Optional[int]) -> str:
  """A count with thousands separators, "-" for None."""
  return "-" if value is None else f"{value:,}"


def difference_cell(difference: Optional[dict]) -> str:
  """"+1.2 (+1.7%)" (a row's test number against the printed one), or "-"."""
  if not difference:
    return "-"
  return f"{difference['difference']:+.1f} ({difference['percent']:+.1f}%)"


def standard_perplexity(record: dict, value) -> str:
  """A cell of a row's perplexity under the standard rule (every token predicted): "n/a" for
  a row trained without a start symbol (`every_token_predicted` False: the released code's
  rows never predict a sentence's first word, so their logged perplexity leaves those words
  out and only the released rule compares them with other rows), else `format_number`."""
  return NOT_APPLICABLE if record.get("every_token_predicted") is False else format_number(value)


def perplexity_cell(record: dict, key: str) -> str:
  """A cell of `record[key]`, a perplexity under `key`'s rule: the released code's (a key
  ending in "_paper_convention") by `format_number`, the standard one by
  `standard_perplexity`; "-" when the record lacks it."""
  value = record.get(key)
  return (format_number(value) if key.endswith("_paper_convention")
          else standard_perplexity(record, value))


def valid_test_cell(valid, test) -> str:
  """"valid / test", each by `format_number`."""
  return f"{format_number(valid)} / {format_number(test)}"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
  """A Markdown table of text cells."""
  lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
  return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def listing(items: Sequence[str]) -> str:
  """Items as prose: "a", "a and b", "a, b and c"."""
  return " and ".join([", ".join(items[:-1]), items[-1]] if len(items) > 2 else items)
