"""Every matmul of the models runs at `nn.PRECISION`, forward and backward, so that
`compute_dtype=float32` is float32 on TPUs and GPUs too (whose default precision rounds float32
matmul inputs to bfloat16 or TF32); on a CPU that precision changes no bit."""

import runpy

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlm_jax import models
from attnlm_jax.models import nn
from attnlm_jax.tagger import model as tagger_model
from attnlm_jax.tagger import trainer as tagger_trainer
import tiny_config

SCORES = tuple(models.SCORE_FUNCTIONS)          # every model, the recurrent ones included
VOCAB = 40


def dot_precisions(jaxpr) -> list:
  """The `precision` of every dot_general in `jaxpr` and in the jaxprs nested in it (scan and
  cond bodies, custom-gradient rules, inner jits)."""
  found = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "dot_general":
      found.append(eqn.params["precision"])
    for value in eqn.params.values():
      for inner in value if isinstance(value, (tuple, list)) else (value,):
        inner = getattr(inner, "jaxpr", inner)          # a ClosedJaxpr's Jaxpr
        if hasattr(inner, "eqns"):
          found.extend(dot_precisions(inner))
  return found


def lm_loss_and_batch(score: str):
  """A tiny model of `score`, its parameters and the training loss of a two-sentence batch."""
  config = tiny_config.config(model__score=score, model__vocab_size=VOCAB).model
  params = models.init(jax.random.key(0), config)
  tokens = jax.random.randint(jax.random.key(1), (2, 7), 1, VOCAB)
  lengths = jnp.array([7, 4])

  def loss(params):
    logits = models.apply(params, config, tokens[:, :-1], lengths - 1, train=True,
                          rng=jax.random.key(2))
    log_probs = jax.nn.log_softmax(logits)
    return -jnp.sum(jnp.take_along_axis(log_probs, tokens[:, 1:, None], axis=-1))

  return loss, params


@pytest.mark.parametrize("score", SCORES)
def test_every_matmul_of_a_training_step_runs_at_full_precision(score):
  loss, params = lm_loss_and_batch(score)
  precisions = dot_precisions(jax.make_jaxpr(jax.grad(loss))(params).jaxpr)
  assert len(precisions) >= 4                                # forward and backward matmuls
  full = (jax.lax.Precision.HIGHEST, jax.lax.Precision.HIGHEST)
  assert all(precision == full for precision in precisions), precisions


def test_every_matmul_of_the_tagger_runs_at_full_precision():
  config = runpy.run_path(str(tiny_config.REPO / "configs" / "tagger.py"))["get_config"]().model
  config.update(embed_size=8, suffix_size=4, hidden_size=8, num_layers=1)
  num_features = len(tagger_model.word_features("a", config))
  params = tagger_model.init(jax.random.key(0), config, num_words=30, num_suffixes=20, num_tags=5)
  batch = {"words": jnp.ones((2, 5), jnp.int32), "tags": jnp.ones((2, 5), jnp.int32),
           "suffixes": jnp.ones((2, 5, num_features), jnp.int32)}
  loss = tagger_trainer._loss  # pylint: disable=protected-access
  grad = jax.grad(lambda p: loss(p, config, batch, jax.random.key(1)))
  precisions = dot_precisions(jax.make_jaxpr(grad)(params).jaxpr)
  assert precisions and all(p == (jax.lax.Precision.HIGHEST,) * 2 for p in precisions)


def test_full_precision_changes_no_bit_of_the_gradients_on_a_cpu(monkeypatch):
  assert jax.default_backend() == "cpu"
  loss, params = lm_loss_and_batch("combined")
  full = jax.jit(jax.grad(loss))(params)
  monkeypatch.setattr(nn, "PRECISION", jax.lax.Precision.DEFAULT)
  default_loss, _ = lm_loss_and_batch("combined")
  default_jaxpr = jax.make_jaxpr(jax.grad(default_loss))(params).jaxpr
  assert (jax.lax.Precision.DEFAULT,) * 2 in dot_precisions(default_jaxpr)  # it did change
  default = jax.jit(jax.grad(default_loss))(params)
  for a, b in zip(jax.tree.leaves(full), jax.tree.leaves(default)):
    np.testing.assert_array_equal(a, b)
