"""The findings table of `salton_ptb` (docs/results/salton_ptb/findings.md): each printed row of
the Salton papers beside what trained here, under the released code's rule and the standard
one: the paper's recipe, the released code's network (configs/released.py), real attention
under the released settings, and the plain LSTM, every seed of each, and a verdict."""

from typing import Sequence

from attnlm_jax.experiments import markdown
from attnlm_jax.experiments import printed
from attnlm_jax.experiments import row_status

TABLE = "salton_ptb"
PAGE = "findings.md"
# The Salton papers' printed rows: score -> the papers' name of the row.
PRINTED = printed.row_names("ptb", (printed.SALTON_2017, printed.SALTON_2018))
# label -> the rows a column reads for a printed row ({score} is the printed row's score).
# The released network's attention is inert, whatever its score: one network for every row.
COLUMNS = {"paper's recipe here": ("{score}", "{score}_seed1"),
           "released network here": ("released", "released_seed1"),
           "attention, released settings": ("released_attention", "released_attention_seed1"),
           "`none` here": ("none", "none_seed1")}
RELEASED_ATTENTION_SCORES = ("single",)   # `released_attention` trains the single score.


def _finished(rows: dict, names: Sequence[str]) -> list[dict]:
  return [rows[n] for n in names if n in rows and rows[n]["status"] == row_status.FINISHED]


def _values(runs: Sequence[dict], key: str) -> str:
  """The runs' perplexities under `key`'s rule, comma-separated ("n/a" where the standard
  rule does not apply, `markdown.standard_perplexity`); "-" for none."""
  released_rule = key.endswith("_paper_convention")
  return ", ".join(markdown.format_number(run[key]) if released_rule
                   else markdown.standard_perplexity(run, run[key]) for run in runs) or "-"


def _cell(rows: dict, names: Sequence[str]) -> str:
  """"released-rule values / standard values" of the finished runs of `names`."""
  runs = _finished(rows, names)
  if not runs:
    started = [rows[n]["status"] for n in names if n in rows
               and rows[n]["status"] != row_status.NOT_STARTED]
    return started[0] if started else "not started"
  return (f"{_values(runs, 'test_perplexity_paper_convention')} / "
          f"{_values(runs, 'test_perplexity')}")


def _percents(rows: dict, names: Sequence[str], paper: printed.PaperResult) -> list[float]:
  """Each finished run's difference to the printed test number, percent, its rule."""
  key = f"test_{printed.compared_key(paper.convention)}"
  return [100.0 * (run[key] - paper.test) / paper.test for run in _finished(rows, names)]


def findings_table(table: dict) -> str:
  """The Markdown table of the findings from a `salton_ptb` results.json."""
  rows = {row["name"]: row for row in table["rows"]}
  lines = []
  for score, model in PRINTED.items():
    paper = printed.paper_result("ptb", model)
    names = {label: tuple(n.format(score=score) for n in columns)
             for label, columns in COLUMNS.items()}
    if score not in RELEASED_ATTENTION_SCORES:
      names["attention, released settings"] = ()
    judged = [f"{label}: {printed.verdict(_percents(rows, columns, paper))}"
              for label, columns in names.items() if columns]
    lines.append([f"`{score}` ({paper.paper})", markdown.format_number(paper.test),
                  *(_cell(rows, columns) if columns else "-" for columns in names.values()),
                  "; ".join(judged)])
  headers = ("printed row", "printed test (released rule)",
             *(f"{label}: released rule / standard" for label in COLUMNS), "verdict")
  return markdown.markdown_table(headers, lines)
