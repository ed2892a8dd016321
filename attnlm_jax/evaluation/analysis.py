"""Looking inside trained models: attention heatmaps, the smoothing effect, agreement probes.

Works on `evaluate.TrainedModel`s and writes PNG figures (matplotlib, Agg canvas) and JSON;
`analyze` runs every analysis on several models, `run` loads them from training workdirs first
(`--mode=analyze`). What each one measures: docs/analysis.md.
"""

import dataclasses
import functools
import gzip
import json
import math
import zlib
from typing import Mapping, Optional, Sequence

from etils import epath
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from attnlm_jax.common import errors
from attnlm_jax.common import json_io
from attnlm_jax.common import text_files
from attnlm_jax.common import figures
from attnlm_jax import data as data_lib
from attnlm_jax.data import batching
from attnlm_jax.data import corpus
from attnlm_jax.evaluation import evaluate
from attnlm_jax import models
from attnlm_jax.models import losses
from attnlm_jax.models import memory as memory_lib
from attnlm_jax.models import scores

ANALYSIS_DIR = "analysis"
# The fields of a probe item and their types.
PROBE_TYPES = {"prefix": str, "correct": str, "wrong": str, "distance": int, "attractors": int}
PROBE_KEYS = tuple(PROBE_TYPES)
ZERO_SLOT_LABEL = "h0=0"
# Tokens (rows x width) per forward pass, and the shortest time axis. All passes of one
# `forward` call have the same power-of-two width and rows, so each compiles once per model.
CHUNK_TOKENS = 2048
MIN_WIDTH = 16


class AnalysisError(errors.UserError):
  """Bad input to an analysis: a malformed probe file, no sentences, a model without weights."""


# ----------------------------------------------------------------------------- forward passes
def slot_labels(model_config, inputs: Sequence[str]) -> list[str]:
  """What each attention slot holds, named by input word (the x axis of a heatmap).

  The memory of the output-layer scores and the LSTMN's tape are [h_0 = 0, h_1 .. h_{T-1}]:
  slot s >= 1 holds the state after reading inputs[s - 1]. The DAS attention reads the input
  embeddings themselves: slot i is inputs[i] (the current input included).
  """
  if "das" in scores.get(model_config.score).recurrence:
    return list(inputs)
  return [ZERO_SLOT_LABEL, *inputs[:-1]]


def valid_slots(model_config, lengths: np.ndarray, num_steps: int) -> np.ndarray:
  """bool [B, T, L=T]: slot i is visible to step t (the cells an attention row may use).

  DAS: inputs 0..t of the sentence; the others: `memory.causal_mask` (the zero slot, then
  the states of the steps before t), or the zero slot alone under `memory='zero_slot'`
  (`models.visible_slots`).
  """
  if "das" in scores.get(model_config.score).recurrence:
    step = np.arange(num_steps)[:, None]
    slot = np.arange(num_steps)[None, :]
    return (slot <= step)[None] & (slot[None] < np.asarray(lengths)[:, None, None])
  causal = memory_lib.causal_mask(jnp.asarray(lengths), num_steps, model_config.zero_slot)
  return np.asarray(models.visible_slots(model_config, causal))


def _batch(encoded: Sequence[np.ndarray], num_rows: int, width: int) -> dict:
  """One evaluation batch: inputs <eos> w_1..w_n, targets w_1..w_n <eos>, padded to width.

  encoded: at most `num_rows` sentences (word ids then EOS_ID); the missing rows are filled
  with the one-token sentence "<eos>" (their results are dropped).
  """
  filler = [np.asarray([data_lib.EOS_ID], np.int32)] * (num_rows - len(encoded))
  rows = [*encoded, *filler]
  lengths = np.asarray([len(e) for e in rows], np.int64)
  starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
  return batching.make_batch(np.concatenate(rows).astype(np.int32), starts, lengths, width)


@functools.partial(jax.jit, static_argnames=("model_config", "attention"))
def _forward(params, batch, *, model_config, attention: bool):
  """(log p of each target [B, T], log-softmax of the last step of each row [B, V],
  attention weights [B, T, L] or None)."""
  outputs = models.apply(params, model_config, batch["inputs"], batch["lengths"],
                         return_attention=attention)
  logits, weights = outputs if attention else (outputs, None)
  return losses.token_log_probs(logits, batch["targets"]), jax.nn.log_softmax(
      logits[jnp.arange(logits.shape[0]), batch["lengths"] - 1]), weights


def forward(model: evaluate.TrainedModel, sentences: Sequence[Sequence[str]],
            attention: bool = False) -> list[dict]:
  """Runs `models.apply` (evaluation mode) on word sequences, CHUNK_TOKENS at a time.

  Returns, per sentence: "tokens" (the predicted tokens, words then <eos>, unknown words as
  <unk>), "inputs" (<eos> then the words), "log_probs" (natural log p of each token),
  "next_log_probs" (log-softmax [V] of the step after the last word, i.e. the distribution
  of the word after the sequence) and with `attention` "weights" [n, n] (n = words + 1) with
  "mask" [n, n] (`valid_slots`).
  """
  if not sentences:
    raise AnalysisError("no sentences given: pass at least one sentence of words")
  config = model.config.model
  frozen = ml_collections.FrozenConfigDict(config)  # hashable: a static jit argument
  encoded = [np.append(model.vocab.encode(s), data_lib.EOS_ID) for s in sentences]
  width = max(MIN_WIDTH, 1 << (max(map(len, encoded)) - 1).bit_length())
  num_rows = max(1, CHUNK_TOKENS // width)
  results = []
  for first in range(0, len(encoded), num_rows):
    chunk = encoded[first:first + num_rows]
    batch = _batch(chunk, num_rows, width)
    log_probs, next_log_probs, weights = jax.device_get(
        _forward(model.params, batch, model_config=frozen, attention=attention))
    mask = valid_slots(config, batch["lengths"], width) if attention else None
    for row, n in enumerate(batch["lengths"][:len(chunk)]):
      result = {"tokens": model.vocab.decode(batch["targets"][row, :n]),
                "inputs": model.vocab.decode(batch["inputs"][row, :n]),
                "log_probs": np.asarray(log_probs[row, :n], np.float64),
                "next_log_probs": np.asarray(next_log_probs[row], np.float64)}
      if attention:
        result["weights"] = np.asarray(weights[row, :n, :n], np.float64)
        result["mask"] = mask[row, :n, :n]
      results.append(result)
  return results


def _words(sentence) -> list[str]:
  return sentence.split() if isinstance(sentence, str) else list(sentence)


# ----------------------------------------------------------------------------- heatmaps
@dataclasses.dataclass(frozen=True)
class SentenceAttention:
  """The attention of one model over one sentence, as drawn in a heatmap.

  slots: what each memory slot holds (x axis); predicted: the word predicted at each step
  (y axis); weights [n, n]: row t = the weights of step t, NaN where the slot is masked.
  """
  model: str
  slots: list[str]
  predicted: list[str]
  weights: np.ndarray


def sentence_attention(model: evaluate.TrainedModel, sentences: Sequence,
                       label: str = "") -> list[SentenceAttention]:
  """The weights `models.apply(..., return_attention=True)` gives each sentence.

  Args:
    model: a model with attention (`models.has_sentence_attention`), else AnalysisError.
    sentences: strings (words split at whitespace) or word sequences.
    label: the model's name in the figures.
  """
  if not models.has_sentence_attention(model.config.model):
    raise AnalysisError(f"model {label or model.config.model.score!r} (score "
                        f"{model.config.model.score!r}) has no attention weights: pass a "
                        "workdir of an attentive model")
  results = forward(model, [_words(s) for s in sentences], attention=True)
  return [SentenceAttention(label, slot_labels(model.config.model, r["inputs"]), r["tokens"],
                            np.where(r["mask"], r["weights"], np.nan)) for r in results]


def plot_attention(attentions: Mapping[str, Sequence[SentenceAttention]], path
                   ) -> list[list[np.ndarray]]:
  """Draws the heatmaps: one row per sentence, one column per model; saves a PNG.

  Args:
    attentions: model label -> its `sentence_attention` list (the same sentences each).
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


def attention_json(attentions: Mapping[str, Sequence[SentenceAttention]]) -> list[dict]:
  """The heatmaps' numbers as JSON: per sentence, per model slots, predicted and weights
  (null where masked)."""
  labels = list(attentions)
  return [{"sentence": " ".join(attentions[labels[0]][i].predicted[:-1]), "models": {
      label: {"slots": a.slots, "predicted": a.predicted,
              "weights": [[None if math.isnan(w) else w for w in row] for row in
                          a.weights.tolist()]}
      for label in labels for a in [attentions[label][i]]}}
          for i in range(len(attentions[labels[0]]))]


# ----------------------------------------------------------------------------- smoothing effect
def attention_entropy(weights: np.ndarray, mask: np.ndarray) -> dict:
  """Entropy of each attention row against the uniform distribution over its valid slots.

  Args:
    weights: [..., L] attention rows; mask: bool [..., L], the valid slots.

  Returns:
    "slots": n, the valid slots of each row; "entropy": H(a) = -sum_i a_i ln a_i (nats) of
    the row renormalised over its valid slots; "uniform_entropy": ln n, the entropy of the
    uniform distribution over them; "kl": KL(a || uniform) = sum_i a_i ln(n a_i) = ln n - H,
    clipped at 0 against rounding. Rows with no valid slot have n = 0 and zeros elsewhere.
  """
  weights = np.where(mask, np.asarray(weights, np.float64), 0.0)
  slots = mask.sum(-1)
  total = weights.sum(-1, keepdims=True)
  probs = np.divide(weights, total, out=np.zeros_like(weights), where=total > 0)
  logs = np.log(probs, out=np.zeros_like(probs), where=probs > 0)
  entropy = -(probs * logs).sum(-1)
  uniform = np.log(np.maximum(slots, 1))
  return {"slots": slots, "entropy": entropy, "uniform_entropy": uniform,
          "kl": np.maximum(uniform - entropy, 0.0)}


def smoothing_effect(model: evaluate.TrainedModel, split: str = "valid",
                     max_sentences: Optional[int] = None) -> dict:
  """The attention's entropy by position, averaged over the sentences of a split.

  Position t is the step that predicts the (t+1)-th token of a sentence. The entropy ratio
  H / ln n is averaged over the rows with at least two valid slots (with one slot every
  distribution is uniform); the KL over all rows with a valid slot.

  Returns:
    {"split", "sentences", "tokens", "entropy", "uniform_entropy", "entropy_ratio", "kl"
     (means over all tokens), "by_position": {"position", "tokens", "entropy",
     "uniform_entropy", "entropy_ratio", "kl"} (lists, one entry per position)}.
  """
  data = model.data
  sentences = [model.vocab.decode(s[:-1]) for s in data.sentences(split)][:max_sentences]
  rows = []
  for result in forward(model, sentences, attention=True):
    stats = attention_entropy(result["weights"], result["mask"])
    stats["position"] = np.arange(len(stats["slots"]))
    rows.append(stats)
  cat = {key: np.concatenate([r[key] for r in rows]) for key in rows[0]}
  used = cat["slots"] >= 1
  ratio_rows = cat["slots"] >= 2
  ratio = np.divide(cat["entropy"], cat["uniform_entropy"],
                    out=np.ones_like(cat["entropy"]), where=ratio_rows)
  by_position = {key: [] for key in ("position", "tokens", "entropy", "uniform_entropy",
                                     "entropy_ratio", "kl")}
  for position in range(int(cat["position"].max()) + 1):
    at = used & (cat["position"] == position)
    if not at.any():
      continue
    by_position["position"].append(position)
    by_position["tokens"].append(int(at.sum()))
    for key in ("entropy", "uniform_entropy", "kl"):
      by_position[key].append(float(cat[key][at].mean()))
    ratio_at = at & ratio_rows
    by_position["entropy_ratio"].append(float(ratio[ratio_at].mean()) if ratio_at.any()
                                        else None)
  return {"split": split, "sentences": len(sentences), "tokens": int(used.sum()),
          **{key: float(cat[key][used].mean()) for key in ("entropy", "uniform_entropy",
                                                           "kl")},
          "entropy_ratio": float(ratio[ratio_rows].mean()) if ratio_rows.any() else None,
          "by_position": by_position}


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


# ----------------------------------------------------------------------------- agreement probe
def default_probe_path():
  """The embedded corpus's agreement set (inside the package)."""
  return corpus.embedded_dir() / corpus.AGREEMENT_FILE


def read_probe(path) -> list[dict]:
  """Reads a probe file: JSON lines {"prefix", "correct", "wrong", "distance",
  "attractors", "construction" (optional)}, gzipped when the name ends in .gz."""
  path = epath.Path(path) if isinstance(path, str) else path
  if not path.is_file():
    raise AnalysisError(f"probe file {path} not found: pass a JSONL file of "
                        "{\"prefix\", \"correct\", \"wrong\", \"distance\", \"attractors\"}")
  raw = path.read_bytes()
  if str(path).endswith(".gz"):
    try:
      raw = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as e:
      raise AnalysisError(f"{path} is not a whole gzip file ({e}): gzip it again, or drop "
                          "the .gz from its name if it is plain text") from None
  text = text_files.decode(str(path), raw, AnalysisError)
  items = []
  for number, line in enumerate(text_files.split_lines(text), 1):
    if not line.strip():
      continue
    try:
      item = json.loads(line)
    except json.JSONDecodeError as e:
      raise AnalysisError(f"{path} line {number} is not JSON ({e.msg}): write one JSON "
                          "object per line") from e
    missing = [key for key in PROBE_KEYS if not isinstance(item, dict) or key not in item]
    if missing:
      raise AnalysisError(f"{path} line {number} lacks {', '.join(missing)}: every line "
                          f"needs {', '.join(PROBE_KEYS)}")
    wrong_type = [key for key, kind in PROBE_TYPES.items()
                  if not isinstance(item[key], kind) or isinstance(item[key], bool)]
    if wrong_type:
      raise AnalysisError(f"{path} line {number}: {', '.join(wrong_type)} of the wrong type "
                          "(prefix, correct and wrong are strings, distance and attractors "
                          "whole numbers)")
    items.append(item)
  if not items:
    raise AnalysisError(f"probe file {path} holds no items: write one JSON object per line")
  return items


def candidate_log_probs(model: evaluate.TrainedModel, items: Sequence[dict]
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """log p(correct | prefix) and log p(wrong | prefix) of each item, and which items count.

  An item counts when both verb forms are in the model's vocabulary (the prefix may hold
  unknown words).
  """
  results = forward(model, [item["prefix"].split() for item in items])
  correct = model.vocab.encode([item["correct"] for item in items])
  wrong = model.vocab.encode([item["wrong"] for item in items])
  next_log_probs = np.stack([r["next_log_probs"] for r in results])
  rows = np.arange(len(items))
  known = (correct != data_lib.UNK_ID) & (wrong != data_lib.UNK_ID)
  return next_log_probs[rows, correct], next_log_probs[rows, wrong], known


def probe_summary(items: Sequence[dict], correct: np.ndarray, wrong: np.ndarray,
                  known: np.ndarray) -> dict:
  """Accuracy (share of counted items with log p(correct) > log p(wrong)), overall and by
  distance, number of attractors and construction.

  Returns:
    {"accuracy", "items" (counted), "skipped" (verb not in the vocabulary),
     "by_distance" / "by_attractors" / "by_construction": {value: {"accuracy", "items"}}}.
  """
  hits = np.asarray(correct) > np.asarray(wrong)
  known = np.asarray(known, bool)

  def accuracy(select: np.ndarray) -> dict:
    count = int((select & known).sum())
    return {"accuracy": float(hits[select & known].mean()) if count else None, "items": count}

  summary = {**accuracy(np.ones(len(items), bool)), "skipped": int((~known).sum())}
  for key in ("distance", "attractors", "construction"):
    values = np.asarray([item.get(key, "") for item in items], object)
    summary[f"by_{key}"] = {str(v): accuracy(values == v)
                            for v in sorted(set(values.tolist()), key=_sort_key)}
  return summary


def _sort_key(value):
  return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


def probe(model: evaluate.TrainedModel, items: Sequence[dict]) -> dict:
  """`probe_summary` of a model on probe items (see `read_probe`)."""
  return probe_summary(items, *candidate_log_probs(model, items))


def format_probe_table(summaries: Mapping[str, dict], key: str = "by_distance") -> str:
  """A Markdown table of the agreement accuracy: one row per value of `key` ("by_distance",
  "by_attractors" or "by_construction"), one column per model, "-" without items."""
  labels = list(summaries)
  values = list(dict.fromkeys(v for s in summaries.values() for v in s[key]))
  cell = lambda s: "-" if s is None or s["accuracy"] is None else (
      f"{s['accuracy']:.3f} ({s['items']})")
  lines = [f"| {key[3:]} | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
  lines += [f"| {v} | " + " | ".join(cell(summaries[l][key].get(v)) for l in labels) + " |"
            for v in values]
  lines.append("| all | " + " | ".join(cell(summaries[l]) for l in labels) + " |")
  return "\n".join(lines)


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


# ----------------------------------------------------------------------------- surprisal
def token_surprisal(model: evaluate.TrainedModel, sentence) -> dict:
  """Per-token scores of one sentence: {"tokens", "log_probs" (natural log p),
  "surprisal" (-log2 p, bits)}."""
  result = forward(model, [_words(sentence)])[0]
  return {"tokens": result["tokens"], "log_probs": result["log_probs"].tolist(),
          "surprisal": (-result["log_probs"] / math.log(2)).tolist()}


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


# ----------------------------------------------------------------------------- all at once
def default_sentences(model: evaluate.TrainedModel, split: str, count: int = 3) -> list[str]:
  """The first `count` sentences of 6 to 15 words of a split of the model's corpus."""
  data = model.data
  chosen = [s for s in data.sentences(split) if 7 <= len(s) <= 16][:count]
  return [" ".join(model.vocab.decode(s[:-1])) for s in chosen]


def read_probes(files: Sequence = ()) -> dict[str, list[dict]]:
  """name (the file name up to its first dot) -> items of each probe file (`read_probe`);
  no files: the embedded agreement set, as "agreement"."""
  files = list(files) or [default_probe_path()]
  return {epath.Path(str(path)).name.split(".")[0]: read_probe(path) for path in files}


def analyze(trained: Mapping[str, evaluate.TrainedModel], out_dir, *,
            sentences: Sequence[str] = (), split: str = "valid",
            probes: Optional[Mapping[str, Sequence[dict]]] = None,
            max_sentences: Optional[int] = None) -> dict:
  """All analyses of several models, written into `out_dir`.

  Args:
    trained: label -> model.
    out_dir: the output directory (created).
    sentences: sentences for the heatmaps and surprisal plots (default: `default_sentences`
      of the first model).
    split: the split the entropy is averaged over.
    probes: probe name -> items (default: `read_probes()`, the embedded agreement set).
    max_sentences: use only the first sentences of the split for the entropy (all: None).

  Writes:
    attention.png + attention.json (models with attention only), entropy.png +
    entropy.json, probe_NAME.png + probe_NAME.json per probe, surprisal_I.png per
    sentence + surprisal.json.

  Returns:
    {"files": written file names, "entropy": {label: means}, "probe": {name: {label:
     accuracy}}}.
  """
  for model in trained.values():   # every analysis reads a sentence from its start symbol
    model.check_every_token("analysis")
  out_dir = epath.Path(out_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  first = next(iter(trained.values()))
  sentences = list(sentences) or default_sentences(first, split)
  attentive = {label: m for label, m in trained.items()
               if models.has_sentence_attention(m.config.model)}
  files, summary = [], {"entropy": {}, "probe": {}}
  if attentive:
    attentions = {label: sentence_attention(m, sentences, label)
                  for label, m in attentive.items()}
    plot_attention(attentions, out_dir / "attention.png")
    json_io.write_json(out_dir / "attention.json", attention_json(attentions))
    effects = {label: smoothing_effect(m, split, max_sentences)
               for label, m in attentive.items()}
    plot_entropy(effects, out_dir / "entropy.png")
    json_io.write_json(out_dir / "entropy.json", effects)
    files += ["attention.png", "attention.json", "entropy.png", "entropy.json"]
    summary["entropy"] = {label: {k: e[k] for k in ("entropy", "uniform_entropy",
                                                      "entropy_ratio", "kl")}
                          for label, e in effects.items()}
  for name, items in (read_probes() if probes is None else probes).items():
    summaries = {label: probe(m, items) for label, m in trained.items()}
    plot_probe(summaries, out_dir / f"probe_{name}.png")
    json_io.write_json(out_dir / f"probe_{name}.json", {"probe": name, "models": summaries})
    files += [f"probe_{name}.png", f"probe_{name}.json"]
    summary["probe"][name] = {label: s["accuracy"] for label, s in summaries.items()}
  surprisals = []
  for index, sentence in enumerate(sentences):
    per_model = {label: token_surprisal(m, sentence) for label, m in trained.items()}
    plot_surprisal(per_model, out_dir / f"surprisal_{index}.png")
    surprisals.append({"sentence": sentence, "models": per_model})
    files.append(f"surprisal_{index}.png")
  json_io.write_json(out_dir / "surprisal.json", surprisals)
  files.append("surprisal.json")
  return {"files": files, **summary}


def model_labels(workdirs: Sequence) -> list[str]:
  """A short unique name per workdir: its last path component (the full path on clashes)."""
  names = [epath.Path(str(w)).name for w in workdirs]
  return [name if names.count(name) == 1 else str(w) for name, w in zip(names, workdirs)]


def load_models(workdirs: Sequence, config=None) -> dict[str, evaluate.TrainedModel]:
  """label -> the best checkpoint of each workdir (`evaluate.load`, with `config` if given)."""
  if not workdirs:
    raise AnalysisError("no workdirs given: pass --workdirs=DIR1,DIR2 (training workdirs)")
  return {label: evaluate.load(workdir, config)
          for label, workdir in zip(model_labels(workdirs), workdirs)}


def run(config, workdirs: Sequence, out_dir, *, sentences: Sequence[str] = (),
        split: str = "valid", probe_files: Sequence = (),
        max_sentences: Optional[int] = None) -> dict:
  """`--mode=analyze`: loads the workdirs' best checkpoints and runs `analyze` into out_dir.

  config: the config to load the models with (None: each workdir's config.json).
  probe_files: probe files (default: the embedded agreement set); read before the models
    are loaded, so a bad file fails fast.
  """
  probes = read_probes(probe_files)
  return analyze(load_models(workdirs, config), out_dir, sentences=sentences, split=split,
                 probes=probes, max_sentences=max_sentences)
