"""The released graph's first steps (output.jsonl) beside this project's rows' logs.

    python docs/results/salton_ptb/probes/released_training/compare.py

(from the repository root, in the project's environment) prints a markdown table of the
token-weighted training loss per 50 steps and draws curves.png beside this file.
"""

import json
import math
import pathlib

from matplotlib import figure as figure_lib

from attnlm_jax.common import figures

HERE = pathlib.Path(__file__).resolve().parent
TABLE = HERE.parents[1]                          # docs/results/salton_ptb
ROWS = ("released", "proj", "single", "none")    # this project's rows, from their logs
UNIGRAM_NOTE = "ln of the unigram model's valid perplexity"


def released_graph() -> dict:
  """{step: train_loss} of the released TF graph (output.jsonl)."""
  lines = [json.loads(line) for line in (HERE / "output.jsonl").read_text().splitlines()]
  return {line["step"]: line["train_loss"] for line in lines if "step" in line}


def row_log(row: str) -> tuple[dict, float]:
  """({step: train_loss}, unigram valid perplexity) from a row's committed metrics.jsonl (a
  step logged twice, after a restart from step 0, keeps its last value)."""
  lines = [json.loads(line) for line in (TABLE / row / "metrics.jsonl").read_text().splitlines()]
  return ({line["step"]: line["train_loss"] for line in lines if "train_loss" in line},
          lines[0]["unigram_valid_perplexity"])


def main():
  tf_curve = released_graph()
  logs = {row: row_log(row)[0] for row in ROWS}
  steps = sorted(tf_curve)
  header = ["step", "released graph (TensorFlow)", *(f"`{row}` here" for row in ROWS)]
  print("| " + " | ".join(header) + " |")
  print("|" + "---|" * len(header))
  for step in steps:
    cells = [f"{tf_curve[step]:.2f}", *(f"{logs[row][step]:.2f}" for row in ROWS)]
    print(f"| {step} | " + " | ".join(cells) + " |")

  fig = figure_lib.Figure(figsize=(7, 4))
  axes = fig.add_subplot()
  axes.plot(steps, [tf_curve[s] for s in steps], "k-o", label="released graph (TensorFlow)")
  for row in ROWS:
    axes.plot(steps, [logs[row][s] for s in steps], "--", label=f"{row} here")
  unigram = row_log("released")[1]
  axes.axhline(math.log(unigram), color="grey", lw=0.8)
  axes.text(steps[-1], math.log(unigram), UNIGRAM_NOTE, ha="right", va="bottom",
            fontsize=8, color="grey")
  axes.set_xlabel("training step (batches of 32 sentences)")
  axes.set_ylabel("training loss, nats per token (50-step mean)")
  axes.set_title("2 x 650 on PTB, learning rate 1.0: the first steps")
  axes.legend(fontsize=8)
  figures.save_figure(fig, HERE / "curves.png")


if __name__ == "__main__":
  main()
