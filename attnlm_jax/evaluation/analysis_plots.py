"""The figures of the analyses: attention heatmaps, entropy, agreement accuracy, surprisal.

Each function draws one PNG (matplotlib, Agg canvas) from the results `analysis` computes.
"""

from typing import Mapping, Sequence

import numpy as np

from attnlm_jax.common import figures


def plot_attention(attentions: Mapping[str, Sequence], path) -> list[list[np.ndarray]]:
  """Draws the heatmaps: one row per sentence, one column per model; saves a PNG.

  Args:
    attentions: model label -> its `analysis.sentence_attention` list (the same sentences each).
    path: the PNG file.

  Returns:
    [sentence][model] the arrays drawn (read back from the figure's images, masked cells
    as NaN).
  """
  labels = list(attentions)
  num_sentences = len(attentions[labels[0]])
  size = max(len(a.slots) for a in attentions[labels[0]])
  fig = figures.new_figure(figsize=((0.3 * size + 1.5) * len(labels) + 1,
                                  (0.3 * size + 1.5) * num_sentences), layout="constrained")
  import matplotlib  # pylint: disable=g-import-not-at-top
  colors = matplotlib.colormaps["Blues"].with_extremes(bad="white")  # masked slots: blank
  axes = fig.subplots(num_sentences, len(labels), squeeze=False)
  drawn, image = [], None
  for row in range(num_sentences):
    drawn.append([])
    for col, label in enumerate(labels):
      att, ax = attentions[label][row], axes[row, col]
      image = ax.imshow(np.ma.masked_invalid(att.weights), cmap=colors, vmin=0.0,
                        vmax=1.0, interpolation="nearest", aspect="equal")
      ax.set_xticks(range(len(att.slots)), att.slots, rotation=90, fontsize=8)
      ax.set_yticks(range(len(att.predicted)), att.predicted, fontsize=8)
      ax.set_xlabel("slot (input word)", fontsize=8)
      ax.set_ylabel("word predicted", fontsize=8)
      ax.set_title(label, fontsize=9)
      drawn[-1].append(np.ma.filled(image.get_array().astype(np.float64), np.nan))
  fig.colorbar(image, ax=axes, shrink=0.6, label="attention weight")
  figures.save_figure(fig, path)
  return drawn


def plot_entropy(effects: Mapping[str, dict], path) -> None:
  """Entropy of the attention by position (solid) against the uniform's ln n (dashed),
  and the entropy ratio H / ln n, one colour per model; saves a PNG."""
  fig = figures.new_figure(figsize=(11, 4))
  ax_entropy, ax_ratio = fig.subplots(1, 2)
  for index, (label, effect) in enumerate(effects.items()):
    color = f"C{index}"
    by_position = effect["by_position"]
    ax_entropy.plot(by_position["position"], by_position["entropy"], color=color, label=label)
    ax_entropy.plot(by_position["position"], by_position["uniform_entropy"], color=color,
                    linestyle="--", label=f"{label}: uniform (ln n)")
    points = [(p, r) for p, r in zip(by_position["position"], by_position["entropy_ratio"])
              if r is not None]
    ax_ratio.plot(*zip(*points), color=color, label=f"{label} (mean {effect['entropy_ratio']:.3f})")
  ax_entropy.set(xlabel="position t (step predicting token t+1)", ylabel="entropy (nats)",
                 title=f"attention entropy ({next(iter(effects.values()))['split']} split)")
  ax_ratio.set(xlabel="position t", ylabel="H(a_t) / ln n_t", ylim=(0, 1.05),
               title="entropy ratio (1 = uniform)")
  ax_ratio.axhline(1.0, color="grey", linewidth=0.8)
  ax_entropy.legend(fontsize=7)
  ax_ratio.legend(fontsize=7)
  figures.save_figure(fig, path)


def plot_probe(summaries: Mapping[str, dict], path) -> None:
  """Agreement accuracy by distance and by number of attractors, one line per model, with
  chance (0.5) marked; saves a PNG."""
  fig = figures.new_figure(figsize=(11, 4))
  from matplotlib import ticker  # pylint: disable=g-import-not-at-top
  for ax, key, xlabel in zip(fig.subplots(1, 2), ("by_distance", "by_attractors"),
                             ("words between subject head and verb", "attractors")):
    for index, (label, summary) in enumerate(summaries.items()):
      points = [(int(v), s["accuracy"]) for v, s in summary[key].items()
                if s["accuracy"] is not None]
      if points:
        ax.plot(*zip(*points), marker="o", color=f"C{index}",
                label=f"{label} ({summary['accuracy']:.3f})")
    ax.axhline(0.5, color="grey", linestyle="--", linewidth=0.8, label="chance")
    ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    ax.set(xlabel=xlabel, ylabel="accuracy", ylim=(0, 1.02),
           title=f"agreement accuracy {key.replace('_', ' ')}")
    ax.legend(fontsize=7)
  figures.save_figure(fig, path)


def plot_surprisal(surprisals: Mapping[str, dict], path) -> None:
  """Bars of the surprisal of each token of one sentence, one group per model; saves a PNG."""
  labels = list(surprisals)
  tokens = surprisals[labels[0]]["tokens"]
  width = 0.8 / len(labels)
  fig = figures.new_figure(figsize=(0.5 * len(tokens) + 2, 3.5))
  ax = fig.subplots()
  for index, label in enumerate(labels):
    ax.bar(np.arange(len(tokens)) + (index - (len(labels) - 1) / 2) * width,
           surprisals[label]["surprisal"], width, color=f"C{index}", label=label)
  ax.set_xticks(range(len(tokens)), tokens, rotation=60, fontsize=8)
  ax.set(ylabel="surprisal -log2 p (bits)", title="per-token surprisal")
  ax.legend(fontsize=7)
  figures.save_figure(fig, path)
