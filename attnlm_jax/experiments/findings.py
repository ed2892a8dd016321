"""The findings table of `salton_ptb` (docs/results/salton_ptb/findings.md): each printed row of
the Salton papers beside what trained here, under the released code's rule and the standard
one: the paper's recipe, the released code's network (configs/released.py), real attention
under the released settings, and the plain LSTM, every seed of each, and a verdict."""

from typing import Sequence

from attnlm_jax.experiments import markdown
from attnlm_jax.experiments import printed
from attnlm_jax.experiments import row_status
from attnlm_jax.experiments import seeds

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


def _values(runs: Sequence[dict], key: str) -> str:
  """The runs' perplexities under `key`'s rule, comma-separated ("n/a" where the standard
  rule does not apply, `markdown.perplexity_cell`), and with two or more numbers their spread
  (max - min, unrounded): "73.8, 73.8 (spread 0.05)"; "-" for none."""
  cells = [markdown.perplexity_cell(run, key) for run in runs]
  text = ", ".join(cells) or "-"
  if len(runs) > 1 and markdown.NOT_APPLICABLE not in cells and "-" not in cells:
    values = [run[key] for run in runs]
    text += f" (spread {max(values) - min(values):.2f})"
  return text


def _cell(rows: dict, names: Sequence[str], runs: Sequence[dict]) -> str:
  """"released-rule values / standard values" of `runs`, the finished runs of `names`; with
  none, the status of the first of `names` started."""
  if not runs:
    started = [rows[n]["status"] for n in names if n in rows
               and rows[n]["status"] != row_status.NOT_STARTED]
    return started[0] if started else "not started"
  return (f"{_values(runs, 'test_perplexity_paper_convention')} / "
          f"{_values(runs, 'test_perplexity')}")


def _percents(runs: Sequence[dict], paper: printed.PaperResult) -> list[float]:
  """Each run's difference to the printed test number, percent, under its rule."""
  key = f"test_{printed.compared_key(paper.convention)}"
  return [printed.percent_of_printed(run[key], paper.test) for run in runs]


def findings_table(table: dict) -> str:
  """The Markdown table of the findings from a `salton_ptb` results.json."""
  rows = {row["name"]: row for row in table["rows"]}
  finished = {run["name"]: run
              for row_runs in seeds.finished_seeds(table).values() for run in row_runs}
  lines = []
  for score, model in PRINTED.items():
    paper = printed.paper_result("ptb", model)
    names = {label: tuple(n.format(score=score) for n in columns)
             for label, columns in COLUMNS.items()}
    if score not in RELEASED_ATTENTION_SCORES:
      names["attention, released settings"] = ()
    runs = {label: [finished[n] for n in columns if n in finished]
            for label, columns in names.items()}
    judged = [f"{label}: {printed.verdict(_percents(runs[label], paper))}"
              for label, columns in names.items() if columns]
    lines.append([f"`{score}` ({paper.paper})", markdown.format_number(paper.test),
                  *(_cell(rows, columns, runs[label]) if columns else "-"
                    for label, columns in names.items()),
                  "; ".join(judged)])
  headers = ("printed row", "printed test (released rule)",
             *(f"{label}: released rule / standard" for label in COLUMNS), "verdict")
  return markdown.markdown_table(headers, lines)
