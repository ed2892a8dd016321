"""The papers' published perplexities, and finished runs laid beside them.

`PAPER_RESULTS` holds the test (and validation) perplexities the four papers print (see
../shared/notes/models.md, "What the tables claim"). The two Salton papers computed them
with their released code's rule, which never predicts a sentence's first word but divides by
every token (`losses.py`, `perplexity_paper_convention`); the DAS and convolutional-attention
papers do not say. A run records both conventions, so `comparison_table` sets each run's
numbers under both rules beside the printed ones of the same corpus and model.
"""

import dataclasses
import json
from typing import Optional, Sequence

from etils import epath
from matplotlib import figure as figure_lib

from attnlm_jax import analysis
from attnlm_jax import errors
from attnlm_jax import logging_utils

SALTON_2017 = "Salton, Ross & Kelleher 2017"
SALTON_2018 = "Salton & Kelleher 2018"
CAO_YU = "Cao & Yu (DAS LM)"
CONV1X1 = "Convolutional attention LM"
RELEASED_CODE_RULE = "released code's rule (first word not predicted)"
NOT_STATED = "not stated"


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
    PaperResult(SALTON_2017, "ptb", "Medium regularized LSTM (Zaremba et al. 2015)", "none",
                "20M", 86.2, 82.7, NOT_STATED),
    PaperResult(SALTON_2017, "ptb", "Large regularized LSTM (Zaremba et al. 2015)", "none",
                "66M", 82.2, 78.4, NOT_STATED),
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

RUN_KEYS = ("valid_perplexity", "test_perplexity", "valid_perplexity_paper_convention",
            "test_perplexity_paper_convention")


class ResultsError(errors.UserError):
  """A workdir without a readable metrics file."""


def model_key(model_config) -> str:
  """The name a run's model has in `PaperResult.score` ("das_lstmn+tags" with POS tags)."""
  tags = "+tags" if model_config.get("pos_tags", False) else ""
  return model_config["score"] + tags


def read_run(workdir) -> dict:
  """The record of a run from its `metrics.jsonl`.

  Returns:
    {"name" (the workdir's last component), "workdir", "corpus", "score" (`model_key`),
     "hidden_size", "num_layers", "params", "finished" (a final evaluation was written),
     "best_epoch", and the final RUN_KEYS (None until finished)}.
  """
  workdir = epath.Path(str(workdir))
  path = workdir / logging_utils.METRICS_FILE
  if not path.exists():
    raise ResultsError(f"{path} not found: {workdir} is not the --workdir of a training run")
  records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
  starts = [r for r in records if r.get("event") == "start"]
  if not starts:
    raise ResultsError(f"{path} has no start record: pass the --workdir of a training run")
  config = starts[-1]["config"]
  finals = [r for r in records if "final_test_perplexity" in r]
  final = finals[-1] if finals else {}
  return {"name": workdir.name, "workdir": str(workdir), "corpus": config["data"]["corpus"],
          "score": model_key(config["model"]), "hidden_size": config["model"]["hidden_size"],
          "num_layers": config["model"]["num_layers"], "params": starts[-1]["num_params"],
          "finished": bool(final), "best_epoch": final.get("best_epoch"),
          **{key: final.get(f"final_{key}") for key in RUN_KEYS}}


def find_runs(root) -> list[epath.Path]:
  """The training workdirs directly inside `root` (those holding a metrics file), sorted."""
  root = epath.Path(str(root))
  if not root.is_dir():
    return []
  return sorted(p for p in root.iterdir() if (p / logging_utils.METRICS_FILE).exists())


def is_finished(workdir) -> bool:
  """True when `workdir` holds a run that has written its final evaluation."""
  try:
    return read_run(workdir)["finished"]
  except ResultsError:
    return False


def comparison_table(workdirs: Sequence) -> list[dict]:
  """The papers' rows and the runs', grouped by (corpus, model), papers first.

  Each row: {"source" ("paper" or "run"), "name", "corpus", "score", "params",
  "printed_valid", "printed_test" (papers), RUN_KEYS (runs), "convention" (papers)}.
  Every paper row is listed, whether or not a run matches it.
  """
  runs = [read_run(w) for w in workdirs]
  rows = [{"source": "paper", "name": f"{p.model} [{p.paper}]", "corpus": p.corpus,
           "score": p.score, "params": p.params, "printed_valid": p.valid,
           "printed_test": p.test, **dict.fromkeys(RUN_KEYS), "convention": p.convention}
          for p in PAPER_RESULTS]
  rows += [{"source": "run", "name": run["name"], "corpus": run["corpus"],
            "score": run["score"], "params": f"{run['params'] / 1e6:.2f}M",
            "printed_valid": None, "printed_test": None,
            **{key: run[key] for key in RUN_KEYS}, "convention": "both"}
           for run in runs]
  order = {score: i for i, score in enumerate(dict.fromkeys(p.score for p in PAPER_RESULTS))}
  return sorted(rows, key=lambda r: (r["corpus"], order.get(r["score"], len(order)),
                                     r["score"], r["source"] != "paper"))


def format_table(rows: Sequence[dict]) -> str:
  """The comparison as a Markdown table (perplexities to one decimal; "-" when absent)."""
  columns = ("corpus", "score", "name", "params", "printed_valid", "printed_test",
             *RUN_KEYS, "convention")
  headers = ("corpus", "model", "source", "params", "paper valid", "paper test",
             "valid", "test", "valid (paper conv.)", "test (paper conv.)",
             "perplexity rule")
  fmt = lambda v: "-" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v)
  lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
  lines += ["| " + " | ".join(fmt(row[c]) for c in columns) + " |" for row in rows]
  return "\n".join(lines)


def plot_comparison(rows: Sequence[dict], path) -> None:
  """Test perplexity per row: printed (papers), and both conventions (runs); saves a PNG."""
  fig = figure_lib.Figure(figsize=(max(6, 0.45 * len(rows) + 2), 5), layout="constrained")
  ax = fig.subplots()
  series = (("printed_test", "paper, as printed", "C0"),
            ("test_perplexity", "run: perplexity", "C1"),
            ("test_perplexity_paper_convention", "run: paper convention", "C2"))
  for offset, (key, label, color) in zip((-0.27, 0.0, 0.27), series):
    points = [(i + offset, row[key]) for i, row in enumerate(rows) if row[key] is not None]
    if points:
      ax.bar(*zip(*points), width=0.27, color=color, label=label)
  ax.set_xticks(range(len(rows)),
                [f"{r['corpus']}: {r['score']}\n{r['name'][:28]}" for r in rows],
                rotation=75, fontsize=7)
  ax.set(ylabel="test perplexity", title="test perplexity: papers vs runs")
  ax.legend(fontsize=8)
  analysis.save_figure(fig, path)
