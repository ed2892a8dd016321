"""Scoring with the batch norm on each batch's own statistics: what a code that never switches
`conv1x1`'s batch norm to its running statistics reports (the convolutional-attention paper
prints 58.4; docs/results/salton_ptb/findings.md, "The convolutional paper's 58.4 and the
batch-norm leak").

`conv1x1` normalises its convolved memory with a batch norm, BN(x) = gamma (x - mu) / sqrt(var
+ eps) + beta. Evaluation (`statistics="running"`, what this project reports) takes mu and var
from the running averages kept in training; `statistics="batch"` takes them over the batch's
own rows and steps, as training does. Then a row's scores depend on every row of its batch at
every step, its own later tokens included: on batches of sentences of one length the model can
read where its sentence ends. Nothing in training or evaluation uses this module; it measures
what that reading is worth. Dropout is off either way.
"""

import functools
import json
from typing import Iterable, Mapping

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from attnlm_jax import models
from attnlm_jax.evaluation import evaluate
from attnlm_jax.models import losses

# Where the batch norm takes its mean and variance from: the running averages of training
# (evaluation's choice) or the batch being scored (training's).
STATISTICS = ("running", "batch")


@functools.lru_cache(maxsize=None)
def _scorer(model_config_json: str, statistics: str):
  """One jitted fn(params, batch) -> (token NLL [B, T], 0 at padding; `losses.nll_sums`) per
  model config and `statistics`, reused across batches."""
  config = ml_collections.ConfigDict(json.loads(model_config_json))
  config.dropout = 0.0

  def score(params, batch):
    logits, _ = models.apply(params, config, batch["inputs"], batch["lengths"],
                             train=statistics == "batch", mutable=True,
                             tags=batch.get("tags"))
    mask = losses.token_mask(batch["lengths"], batch["targets"].shape[1])
    nll = jnp.where(mask, -losses.token_log_probs(logits, batch["targets"]), 0.0)
    return nll, losses.nll_sums(logits, batch["inputs"], batch["targets"], batch["lengths"])
  return jax.jit(score)


def _score(model: evaluate.TrainedModel, batch: Mapping[str, np.ndarray], statistics: str):
  if statistics not in STATISTICS:
    raise ValueError(f"statistics={statistics!r}: expected one of {STATISTICS}")
  config_json = model.config.model.copy_and_resolve_references().to_json()
  return _scorer(config_json, statistics)(model.params, batch)


def token_nll(model: evaluate.TrainedModel, batch: Mapping[str, np.ndarray],
              statistics: str) -> np.ndarray:
  """-log p(target) [B, T] of one batch (`pipeline.split_batch`'s keys), 0 at padding, with the
  batch norm on `statistics` ("running" or "batch")."""
  return np.asarray(_score(model, batch, statistics)[0])


def perplexities(model: evaluate.TrainedModel, batches: Iterable[Mapping[str, np.ndarray]],
                 statistics: str) -> dict:
  """`losses.perplexities` of every token of `batches` and their number ("tokens"), with the
  batch norm on `statistics` ("running" or "batch"): each batch is normalised by its own
  statistics under "batch", so the result depends on how the sentences are grouped."""
  total = dict.fromkeys(losses.SUM_KEYS, 0.0)
  for batch in batches:
    for key, value in _score(model, batch, statistics)[1].items():
      total[key] += float(value)
  return {**losses.perplexities(total), "tokens": int(total["tokens"])}
