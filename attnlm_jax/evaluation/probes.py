"""The agreement probe: reading probe files, scoring the two verb forms, accuracy tables.

A probe item is a prefix and a correct and a wrong verb form; a model gets it right when it
gives the correct form the higher probability. Format and measures: docs/analysis.md.
"""

import json
from typing import Mapping, Sequence

from etils import epath
import numpy as np

from attnlm_jax.common import text_files
from attnlm_jax import data as data_lib
from attnlm_jax.data import corpus
from attnlm_jax.evaluation import evaluate
from attnlm_jax.evaluation import forward_passes
from attnlm_jax.evaluation.forward_passes import AnalysisError

# The fields of a probe item and their types.
PROBE_TYPES = {"prefix": str, "correct": str, "wrong": str, "distance": int, "attractors": int}
PROBE_KEYS = tuple(PROBE_TYPES)


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
    raw = text_files.gunzip(str(path), raw, AnalysisError, "is not a whole gzip file",
                            "gzip it again, or drop the .gz from its name if it is plain text")
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
  results = forward_passes.forward(model, [item["prefix"].split() for item in items])
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


def read_probes(files: Sequence = ()) -> dict[str, list[dict]]:
  """name (the file name up to its first dot) -> items of each probe file (`read_probe`);
  no files: the embedded agreement set, as "agreement"."""
  files = list(files) or [default_probe_path()]
  return {epath.Path(str(path)).name.split(".")[0]: read_probe(path) for path in files}
