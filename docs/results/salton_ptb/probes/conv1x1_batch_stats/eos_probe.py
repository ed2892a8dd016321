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

import jax
import jax.numpy as jnp
import numpy as np

from attnlm_jax import data as data_lib
from attnlm_jax import models
from attnlm_jax.evaluation import evaluate
from attnlm_jax.models import losses

model = evaluate.load(sys.argv[1])
num_batches = int(sys.argv[2])
config = model.config.model.copy_and_resolve_references()
config.dropout = 0.0


@jax.jit
def with_running_stats(params, batch):
  logits = models.apply(params, config, batch["inputs"], batch["lengths"])
  return -losses.token_log_probs(logits, batch["targets"])


@jax.jit
def with_batch_stats(params, batch):
  logits, _ = models.apply(params, config, batch["inputs"], batch["lengths"], train=True,
                           mutable=True)
  return -losses.token_log_probs(logits, batch["targets"])


results = []
for bucket in (True, False):
  data_config = model.config.data.copy_and_resolve_references()
  data_config.bucket = bucket
  iterator = data_lib.load(data_config, model.vocab).train_iterator(epoch=99)
  batches = [{k: jnp.asarray(v) for k, v in next(iterator).items()} for _ in range(num_batches)]
  for name, token_nll in (("running", with_running_stats), ("batch", with_batch_stats)):
    nll, is_eos = [], []
    for batch in batches:
      mask = np.asarray(losses.token_mask(batch["lengths"], batch["targets"].shape[1]))
      nll.append(np.asarray(token_nll(model.params, batch))[mask])
      is_eos.append(np.asarray(batch["targets"])[mask] == data_lib.EOS_ID)
    nll, is_eos = np.concatenate(nll), np.concatenate(is_eos)
    results.append({"batches": "bucketed by length" if bucket else "random sentences",
                    "statistics": name, "perplexity": float(np.exp(nll.mean())),
                    "eos_targets": int(is_eos.sum()), "eos_nll": float(nll[is_eos].mean()),
                    "eos_probability": float(np.exp(-nll[is_eos].mean())),
                    "other_perplexity": float(np.exp(nll[~is_eos].mean()))})
print(json.dumps({"checkpoint_step": model.step, "num_batches": num_batches,
                  "results": results}))
