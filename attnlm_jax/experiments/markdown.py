"""Markdown for the pages: table cells and tables."""

import math
from typing import Sequence


def format_number(value) -> str:
  """A table cell: "-" for None, floats (perplexities) to one decimal ("diverged" for one
  that is not finite), anything else as is."""
  if value is None:
    return "-"
  if isinstance(value, float):
    return f"{value:.1f}" if math.isfinite(value) else "diverged"
  return str(value)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
  """A Markdown table of text cells."""
  lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
  return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def listing(items: Sequence[str]) -> str:
  """Items as prose: "a", "a and b", "a, b and c"."""
  return " and ".join([", ".join(items[:-1]), items[-1]] if len(items) > 2 else items)
