"""Looking inside trained models: attention heatmaps, the smoothing effect, agreement probes.

Works on `evaluate.TrainedModel`s and writes PNG figures (matplotlib, Agg canvas) and JSON;
`analyze` runs every analysis on several models, `run` loads them from training workdirs first
(`--mode=analyze`). What each one measures: docs/analysis.md.
"""

import dataclasses
import math
from typing import Mapping, Optional, Sequence

from etils import epath
import numpy as np

from attnlm_jax.common import json_io
from attnlm_jax.evaluation import analysis_plots
from attnlm_jax.evaluation import evaluate
from attnlm_jax.evaluation import forward_passes
from attnlm_jax.evaluation import probes as probes_lib
from attnlm_jax.evaluation.forward_passes import AnalysisError
from attnlm_jax import models

ANALYSIS_DIR = "analysis"


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
  results = forward_passes.forward(model, [forward_passes.words(s) for s in sentences],
                                    attention=True)
  return [SentenceAttention(label, forward_passes.slot_labels(model.config.model, r["inputs"]),
                            r["tokens"], np.where(r["mask"], r["weights"], np.nan))
          for r in results]


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
  for result in forward_passes.forward(model, sentences, attention=True):
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


# ----------------------------------------------------------------------------- surprisal
def token_surprisal(model: evaluate.TrainedModel, sentence) -> dict:
  """Per-token scores of one sentence: {"tokens", "log_probs" (natural log p),
  "surprisal" (-log2 p, bits)}."""
  result = forward_passes.forward(model, [forward_passes.words(sentence)])[0]
  return {"tokens": result["tokens"], "log_probs": result["log_probs"].tolist(),
          "surprisal": (-result["log_probs"] / math.log(2)).tolist()}


# ----------------------------------------------------------------------------- all at once
def default_sentences(model: evaluate.TrainedModel, split: str, count: int = 3) -> list[str]:
  """The first `count` sentences of 6 to 15 words of a split of the model's corpus."""
  data = model.data
  chosen = [s for s in data.sentences(split) if 7 <= len(s) <= 16][:count]
  return [" ".join(model.vocab.decode(s[:-1])) for s in chosen]


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
    probes: probe name -> items (default: `probes.read_probes()`, the embedded agreement set).
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
    analysis_plots.plot_attention(attentions, out_dir / "attention.png")
    json_io.write_json(out_dir / "attention.json", attention_json(attentions))
    effects = {label: smoothing_effect(m, split, max_sentences)
               for label, m in attentive.items()}
    analysis_plots.plot_entropy(effects, out_dir / "entropy.png")
    json_io.write_json(out_dir / "entropy.json", effects)
    files += ["attention.png", "attention.json", "entropy.png", "entropy.json"]
    summary["entropy"] = {label: {k: e[k] for k in ("entropy", "uniform_entropy",
                                                      "entropy_ratio", "kl")}
                          for label, e in effects.items()}
  for name, items in (probes_lib.read_probes() if probes is None else probes).items():
    summaries = {label: probes_lib.probe(m, items) for label, m in trained.items()}
    analysis_plots.plot_probe(summaries, out_dir / f"probe_{name}.png")
    json_io.write_json(out_dir / f"probe_{name}.json", {"probe": name, "models": summaries})
    files += [f"probe_{name}.png", f"probe_{name}.json"]
    summary["probe"][name] = {label: s["accuracy"] for label, s in summaries.items()}
  surprisals = []
  for index, sentence in enumerate(sentences):
    per_model = {label: token_surprisal(m, sentence) for label, m in trained.items()}
    analysis_plots.plot_surprisal(per_model, out_dir / f"surprisal_{index}.png")
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
  probes = probes_lib.read_probes(probe_files)
  return analyze(load_models(workdirs, config), out_dir, sentences=sentences, split=split,
                 probes=probes, max_sentences=max_sentences)
