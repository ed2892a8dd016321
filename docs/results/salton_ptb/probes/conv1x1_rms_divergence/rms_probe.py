"""Where the RMS rule of dynamic evaluation breaks on the salton_ptb row conv1x1: the step
sizes it gives each parameter array, and what moved when a pass over valid diverged.

    python docs/results/salton_ptb/probes/conv1x1_rms_divergence/rms_probe.py \
        ~/attnlm_runs/salton_ptb/conv1x1 > rms_probe.jsonl

First one JSON line per trainable array: its sqrt(MS_g) (`dynamic_eval.gradient_rms`: the
root mean squared gradient over the training batches it samples) and the gain of the rule's
step, 1 / (sqrt(MS_g) + epsilon), at its quantiles. Then the pass at the grid's smallest point
(eta 1e-4, lambda 0.01), one line per window until a window scores worse than a uniform guess
(or MAX_WINDOWS): its NLL per token, the array that moved furthest from the trained weights
and by how much, and, for the embedding (tied to the softmax), the row that moved furthest:
its word, that word's count in the training split and in the batches MS_g sampled, and the
row's sqrt(MS_g). Needs ATTNLM_DATA_DIR (or the corpus in the data dir).
"""
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

from attnlm_jax import dynamic_eval
from attnlm_jax import evaluate
from attnlm_jax import models

MAX_WINDOWS = 400
LEARNING_RATE, DECAY = 1e-4, 0.01

model = evaluate.load(sys.argv[1])
evaluator = dynamic_eval.DynamicEvaluator(model)
rule = evaluator.rule("rms")
vocab_size = model.config.model.vocab_size


def named_leaves(tree):
  """[(name, array)] of a pytree, names joined with '/'."""
  return [("/".join(str(getattr(key, "key", key)) for key in path), np.asarray(leaf))
          for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]]


rms = dict(named_leaves(jax.tree.map(lambda d: d - dynamic_eval.EPSILON, rule.denominator)))
quantiles = (0.0, 0.001, 0.01, 0.5, 1.0)
for name, leaf in rms.items():
  print(json.dumps({"array": name, "shape": list(leaf.shape),
                    "rms_quantiles": dict(zip(map(str, quantiles),
                                              np.quantile(leaf, quantiles).tolist())),
                    "gain_max": float(1 / (leaf.min() + dynamic_eval.EPSILON))}), flush=True)

embedding = next(name for name, leaf in rms.items() if leaf.shape[0] == vocab_size)
train_counts = np.bincount(evaluator.data.split("train").tokens, minlength=vocab_size)
batch_size = model.config.data.eval_batch_size
total = -(-len(evaluator.data.units("train")[0]) // batch_size)
chosen = set(np.linspace(0, total - 1, min(dynamic_eval.STAT_BATCHES, total)).round().astype(int))
sampled_counts = np.zeros(vocab_size, np.int64)
for index, batch in enumerate(evaluator.data.eval_batches("train", batch_size)):
  if index in chosen:  # The batches gradient_rms sampled (its own choice, repeated).
    for row, length in zip(np.asarray(batch["targets"]), np.asarray(batch["lengths"])):
      sampled_counts += np.bincount(row[:length], minlength=vocab_size)

params = jax.tree.map(jnp.asarray, model.params)
anchor = models.trainable(params)
trained = dict(named_leaves(anchor))
uniform_nll = np.log(vocab_size)
for index, window in enumerate(evaluator.windows("valid")[:MAX_WINDOWS], 1):
  params, log_probs, _ = evaluator._adapt(params, anchor, rule, window.batch, None,
                                          np.float32(LEARNING_RATE), np.float32(DECAY))
  nll = float(-np.asarray(log_probs).sum() / window.batch["lengths"].sum())
  moved = {name: np.abs(leaf - trained[name])
           for name, leaf in named_leaves(models.trainable(params))}
  furthest = max(moved, key=lambda name: moved[name].max())
  row = int(moved[embedding].max(axis=1).argmax())
  print(json.dumps({"window": index, "nll_per_token": nll, "furthest_array": furthest,
                    "furthest_move": float(moved[furthest].max()),
                    "embedding_row": row, "word": model.vocab.words[row],
                    "embedding_row_move": float(moved[embedding][row].max()),
                    "train_count": int(train_counts[row]),
                    "sampled_count": int(sampled_counts[row]),
                    "row_rms_mean": float(rms[embedding][row].mean())}), flush=True)
  if not nll <= uniform_nll:
    break
