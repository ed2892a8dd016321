"""Why the RMS rule of dynamic evaluation diverged on `conv1x1`: the step gains it gives each
parameter array, from MS_g over 200 evenly spaced training batches (`dynamic_eval.gradient_rms`
until 2026-11-28) and from MS_g over every training batch (since), and the rule's valid grid
with each.

    python docs/results/ptb_cpu/probes/conv1x1_rms_divergence/rms_probe.py \
        ~/attnlm_runs/ptb_cpu/conv1x1 > rms_probe.jsonl

Lines: one per (MS_g, trainable array): sqrt(MS_g) at its quantiles and the largest gain of the
rule's step, 1 / (min sqrt(MS_g) + epsilon); one for the embedding (tied to the softmax): the
words that no sampled batch holds, their share of the vocabulary and of valid's tokens; and the
pass of every point of the rule's grid (`dynamic_eval.GRIDS["rms"]`) over valid with each
MS_g: its perplexity (infinite: diverged). Needs ATTNLM_DATA_DIR (or the corpus in the data
dir).
"""
import sys

import jax
import numpy as np

from attnlm_jax.common import json_io
from attnlm_jax.evaluation import evaluate
from attnlm_jax.testtime import dynamic_eval

model = evaluate.load(sys.argv[1])
evaluator = dynamic_eval.DynamicEvaluator(model)
vocab_size = model.config.model.vocab_size
dynamic_eval.STAT_BATCHES = 200       # gradient_rms reads it per call.
sampled_batches = set(evaluator.stat_batches())
rules = {"sampled": evaluator.rule("rms")}
dynamic_eval.STAT_BATCHES = None      # Every training batch.
rules["every batch"] = evaluator.rule("rms")


def named_leaves(tree):
  """[(name, array)] of a pytree, names joined with '/'."""
  return [("/".join(str(getattr(key, "key", key)) for key in path), np.asarray(leaf))
          for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]]


quantiles = (0.0, 0.001, 0.01, 0.5, 1.0)
for ms_g, rule in rules.items():
  for name, denominator in named_leaves(rule.denominator):
    rms = denominator - dynamic_eval.EPSILON
    print(json_io.dumps({"ms_g": ms_g, "array": name, "shape": list(rms.shape),
                         "rms_quantiles": dict(zip(map(str, quantiles),
                                                   np.quantile(rms, quantiles).tolist())),
                         "gain_max": float(1 / denominator.min())}), flush=True)

sampled = np.zeros(vocab_size, bool)
batches = evaluator.data.eval_batches("train", model.config.data.eval_batch_size)
for index, batch in enumerate(batches):
  if index in sampled_batches:
    for row, length in zip(np.asarray(batch["inputs"]), np.asarray(batch["lengths"])):
      sampled[row[:length]] = True
valid_counts = np.bincount(evaluator.data.split("valid").tokens, minlength=vocab_size)
print(json_io.dumps({"embedding_words_unsampled": int((~sampled).sum()),
                     "vocabulary": vocab_size,
                     "valid_token_share_unsampled": float(valid_counts[~sampled].sum()
                                                          / valid_counts.sum())}), flush=True)

grid = dynamic_eval.GRIDS["rms"]
for ms_g, rule in rules.items():
  for learning_rate in grid["learning_rate"]:
    for decay in grid["decay"]:
      found = dynamic_eval.perplexities(
          evaluator.data.split("valid").tokens,
          evaluator.split_log_probs("valid", rule, learning_rate, decay))
      print(json_io.dumps({"ms_g": ms_g, "learning_rate": learning_rate, "decay": decay,
                           **found}), flush=True)
