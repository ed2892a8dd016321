"""What the batch norm's batch statistics told the `conv1x1` row trained with them.

From the repository root:
  python docs/results/salton_ptb/probes/conv1x1_batch_stats/eos_probe.py WORKDIR 40
WORKDIR: the run directory of the row that trained on bucketed batches (this directory's
config.json and metrics.jsonl; its best checkpoint, epoch 11, is read). Prints one JSON line
(eos_probe.json): the perplexity of the first 40 training batches of a fixed epoch (dropout
off), of their `<eos>` targets (mean NLL, probability) and of the other tokens, with the batch
norm normalising by the running statistics (evaluation) or by each step's batch statistics
(training), over batches bucketed by length (as trained) or of random sentences.
"""
import json
import sys

import numpy as np

from attnlm_jax import data as data_lib
from attnlm_jax.evaluation import batch_statistics
from attnlm_jax.evaluation import evaluate

model = evaluate.load(sys.argv[1])
num_batches = int(sys.argv[2])

results = []
for bucket in (True, False):
  data_config = model.config.data.copy_and_resolve_references()
  data_config.bucket = bucket
  iterator = data_lib.load(data_config, model.vocab).train_iterator(epoch=99)
  batches = [next(iterator) for _ in range(num_batches)]
  for statistics in batch_statistics.STATISTICS:
    nll, is_eos = [], []
    for batch in batches:
      mask = np.arange(batch["targets"].shape[1])[None, :] < batch["lengths"][:, None]
      nll.append(batch_statistics.token_nll(model, batch, statistics)[mask])
      is_eos.append(batch["targets"][mask] == data_lib.EOS_ID)
    nll, is_eos = np.concatenate(nll), np.concatenate(is_eos)
    results.append({"batches": "bucketed by length" if bucket else "random sentences",
                    "statistics": statistics, "perplexity": float(np.exp(nll.mean())),
                    "eos_targets": int(is_eos.sum()), "eos_nll": float(nll[is_eos].mean()),
                    "eos_probability": float(np.exp(-nll[is_eos].mean())),
                    "other_perplexity": float(np.exp(nll[~is_eos].mean()))})
print(json.dumps({"checkpoint_step": model.step, "num_batches": num_batches,
                  "results": results}))
