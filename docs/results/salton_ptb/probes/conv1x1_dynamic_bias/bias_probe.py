"""Dynamic SGD on the salton_ptb row conv1x1, its first 16 valid sentences, with and without
its context bias b adapted (scores.Score.inert), from its best checkpoint.

    python docs/results/salton_ptb/probes/conv1x1_dynamic_bias/bias_probe.py \
        ~/attnlm_runs/salton_ptb/conv1x1 > bias_probe.jsonl

One JSON line per (learning rate, arm, window): the window's NLL per token before its step and
b after it. Arm "all" steps every trainable parameter (the rule before b was held); arm
"inert held" is `dynamic_eval`'s step. Needs ATTNLM_DATA_DIR (or the corpus in the data dir).
bias_probe.jsonl was made from the Intel Xeon run's checkpoint (step 18410,
`../conv1x1_xeon/`), the row's run directory then.
"""
import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

from attnlm_jax.evaluation import evaluate
from attnlm_jax import models
from attnlm_jax.testtime import dynamic_eval

model = evaluate.load(sys.argv[1])
evaluator = dynamic_eval.DynamicEvaluator(model)
windows = evaluator.windows("valid")[:16]
trained = jax.tree.map(jnp.asarray, model.params)
anchor = models.trainable(trained)
rule = evaluator.rule("sgd")
config = model.config.model


@jax.jit
def step_all(params, batch, learning_rate):
  """Scores a window, then one SGD step on every trainable parameter, b included."""
  def loss(weights):
    log_probs, _ = dynamic_eval._window_log_probs({**params, **weights}, batch, None, config)
    return -log_probs.sum() / batch["lengths"].sum(), log_probs
  grads, log_probs = jax.grad(loss, has_aux=True)(models.trainable(params))
  weights = jax.tree.map(lambda w, g: w - learning_rate * g, models.trainable(params), grads)
  return {**params, **weights}, log_probs


for learning_rate in (0.0037, 0.1):
  for arm in ("all", "inert held"):
    params = trained
    for index, window in enumerate(windows):
      if arm == "all":
        params, log_probs = step_all(params, window.batch, np.float32(learning_rate))
      else:
        params, log_probs, _ = evaluator._adapt(params, anchor, rule, window.batch, None,
                                                np.float32(learning_rate), np.float32(0.0))
      print(json.dumps({"learning_rate": learning_rate, "arm": arm, "window": index + 1,
                        "nll_per_token": float(-np.asarray(log_probs).sum()
                                               / window.batch["lengths"].sum()),
                        "b": float(params["score"]["slot_b"])}), flush=True)
