"""Validation perplexity of a `conv1x1` checkpoint with its batch norm normalising by the
running statistics (evaluation, as reported) or by each step's batch statistics (as in
training), dropout off, over every validation sentence once in batches of 32 random sentences
(padded to 35 tokens as in training; a longer sentence widens its batch).

From the repository root:
  python docs/results/salton_ptb/probes/conv1x1_valid_stats/valid_stats_probe.py WORKDIR [SEED]
WORKDIR: the run directory of the `salton_ptb` row `conv1x1` (its best checkpoint is read;
valid_stats_probe.json: step 18410, epoch 14, while the row was still training). Prints one
JSON line: both perplexities and the tokens they cover.
"""
import json
import sys

import numpy as np

from attnlm_jax.data import pipeline
from attnlm_jax.evaluation import batch_statistics
from attnlm_jax.evaluation import evaluate

model = evaluate.load(sys.argv[1])
seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0

lm_data = model.data
split, (starts, lengths) = lm_data.split("valid"), lm_data.units("valid")
order = np.random.default_rng(seed).permutation(len(starts))
batches = []
for first in range(0, len(order), 32):
  rows = order[first:first + 32]
  width = max(35, int(lengths[rows].max()))
  batches.append(pipeline.split_batch(split, starts[rows], lengths[rows], width))
result = {"checkpoint_step": model.step, "seed": seed, "batches": len(batches)}
for statistics in batch_statistics.STATISTICS:
  scored = batch_statistics.perplexities(model, batches, statistics)
  result[statistics] = {"tokens": scored["tokens"], "perplexity": scored["perplexity"]}
print(json.dumps(result))
