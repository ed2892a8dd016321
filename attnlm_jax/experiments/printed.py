"""The papers' printed perplexities, and finished runs set beside them.

`PAPER_RESULTS` holds the numbers the papers print. The Salton papers computed them with their
released code's rule (a sentence's first word not predicted, every token counted:
`losses.perplexities`); Zaremba et al. predicted every token; the DAS and conv1x1 papers do not
say. `paper_differences` compares a run under the paper's rule (the standard one when unstated).
"""

import dataclasses
from typing import Optional, Sequence

ZAREMBA = "Zaremba, Sutskever & Vinyals 2015"
SALTON_2017 = "Salton, Ross & Kelleher 2017"
SALTON_2018 = "Salton & Kelleher 2018"
CAO_YU = "Cao & Yu (DAS LM)"
CONV1X1 = "Convolutional attention LM"
RELEASED_CODE_RULE = "released code's rule (first word not predicted)"
STANDARD_RULE = "standard (every token predicted)"
NOT_STATED = "not stated"
TOLERANCE = 2.0   # Percent of a printed number within which a run reproduces it.


@dataclasses.dataclass(frozen=True)
class PaperResult:
  """One printed row: perplexities as printed, with the model it corresponds to here."""
  paper: str
  corpus: str        # "ptb" or "wikitext2"
  model: str         # the paper's name for the model
  score: str         # this project's `config.model.score`
  params: str        # parameter count as printed
  valid: Optional[float]
  test: float
  convention: str    # how the paper computed perplexity


PAPER_RESULTS = (
    # Zaremba et al.'s Table 1 (stream protocol, untied softmax); the parameter counts are
    # those Salton et al. (2017) print beside these rows.
    PaperResult(ZAREMBA, "ptb", "Non-regularized LSTM", "none", "-", 120.7, 114.5,
                STANDARD_RULE),
    PaperResult(ZAREMBA, "ptb", "Medium regularized LSTM", "none", "20M", 86.2, 82.7,
                STANDARD_RULE),
    PaperResult(ZAREMBA, "ptb", "Large regularized LSTM", "none", "66M", 82.2, 78.4,
                STANDARD_RULE),
    PaperResult(SALTON_2017, "ptb", "Attentive LM, single score", "single", "14.5M", 71.7,
                70.1, RELEASED_CODE_RULE),
    PaperResult(SALTON_2017, "ptb", "Attentive LM, combined score", "combined", "14.5M",
                72.6, 70.7, RELEASED_CODE_RULE),
    PaperResult(SALTON_2018, "ptb", "Averaging RNN-LM", "average", "14.1M", 71.6, 69.9,
                RELEASED_CODE_RULE),
    PaperResult(CAO_YU, "ptb", "LSTM 1x300", "none", "-", 91.3, 88.1, NOT_STATED),
    PaperResult(CAO_YU, "ptb", "LSTMN", "lstmn", "-", 90.9, 87.0, NOT_STATED),
    PaperResult(CAO_YU, "ptb", "DAS LM", "das", "-", 90.5, 86.6, NOT_STATED),
    PaperResult(CAO_YU, "ptb", "DAS-LSTMN", "das_lstmn", "-", 88.8, 85.3, NOT_STATED),
    PaperResult(CAO_YU, "ptb", "DAS-LSTMN + tagging model", "das_lstmn+tags", "-", 88.3,
                85.0, NOT_STATED),
    PaperResult(CAO_YU, "ptb", "DAS-LSTMN + tags, interpolated with LSTM", "interpolated",
                "-", 84.2, 80.7, NOT_STATED),
    PaperResult(CONV1X1, "ptb", "LSTM + 1x1 convolutional attention", "conv1x1", "8M", 61.3,
                58.4, NOT_STATED),
    PaperResult(SALTON_2017, "wikitext2", "Attentive LM, single score", "single", "50M",
                73.7, 69.7, RELEASED_CODE_RULE),
    PaperResult(SALTON_2017, "wikitext2", "Attentive LM, combined score", "combined", "50M",
                74.3, 70.8, RELEASED_CODE_RULE),
    PaperResult(SALTON_2018, "wikitext2", "Averaging RNN-LM", "average", "50M", 74.6, 71.3,
                RELEASED_CODE_RULE),
    PaperResult(CONV1X1, "wikitext2", "LSTM + 1x1 convolutional attention", "conv1x1", "8M",
                53.7, 50.1, NOT_STATED),
)


def row_names(corpus: str, papers: Sequence[str]) -> dict[str, str]:
  """score -> the paper's name of its printed row, for the rows of `papers` on `corpus`."""
  return {result.score: result.model for result in PAPER_RESULTS
          if result.corpus == corpus and result.paper in papers}


def paper_result(corpus: str, model: str) -> PaperResult:
  """The row of PAPER_RESULTS printed for `model` (the paper's name) on `corpus`."""
  for result in PAPER_RESULTS:
    if (result.corpus, result.model) == (corpus, model):
      return result
  raise KeyError(f"no printed result for {model!r} on {corpus!r} in printed.PAPER_RESULTS")


def compared_key(convention: str) -> str:
  """The run's perplexity to set against a paper's: under the released code's rule for the
  papers that used it, the standard one otherwise (also when the paper does not say)."""
  return "perplexity_paper_convention" if convention == RELEASED_CODE_RULE else "perplexity"


def paper_differences(run: dict, paper: PaperResult) -> dict:
  """How far a run's numbers are from the printed ones, under the paper's rule.

  Args:
    run: holds RUN_KEYS (values may be None).
    paper: the printed row.

  Returns:
    {"compared": the run's perplexity compared (`compared_key`), "valid" and "test":
     {"run", "printed", "difference" (run - printed), "percent" (of printed)}, or None
     when either number is missing}.
  """
  key = compared_key(paper.convention)
  result = {"compared": key}
  for split, printed in (("valid", paper.valid), ("test", paper.test)):
    value = run.get(f"{split}_{key}")
    result[split] = None if value is None or printed is None else {
        "run": value, "printed": printed, "difference": value - printed,
        "percent": percent_of_printed(value, printed)}
  return result


def percent_of_printed(value: float, printed: float) -> float:
  """`value` - `printed`, in percent of `printed`."""
  return 100.0 * (value - printed) / printed


def verdict(percents: Sequence[float]) -> str:
  """The verdict on a printed number from the finished seeds' differences to it (percent of
  it, under its rule): "reproduces" (every seed within TOLERANCE percent), "misses" (every seed
  higher by more), "beats" (every seed lower by more), "seeds disagree"; with one seed, what
  it shows and that it is one ("higher, 1 seed")."""
  if not percents:
    return "-"
  sides = {0 if abs(p) <= TOLERANCE else (1 if p > 0 else -1) for p in percents}
  if len(percents) == 1:
    return {0: f"within {TOLERANCE:g}%", 1: "higher", -1: "lower"}[sides.pop()] + ", 1 seed"
  if len(sides) > 1:
    return f"seeds disagree ({len(percents)} seeds)"
  return {0: "reproduces", 1: "misses", -1: "beats"}[sides.pop()] + f" ({len(percents)} seeds)"
