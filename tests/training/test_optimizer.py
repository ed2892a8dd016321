"""The optimizer (`steps.make_optimizer`): clipped SGD, and the output layer's own learning rate
(`config.train.head_lr_factor`), checked against a hand computation."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from attnlm_jax.common.errors import ConfigError
from attnlm_jax import models
from attnlm_jax.training import run_config
from attnlm_jax.training import steps

import tiny_config

LEARNING_RATE, GRAD_CLIP = 0.7, 5.0


def _train_config(**fields) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict({"learning_rate": LEARNING_RATE, "grad_clip": GRAD_CLIP,
                                    **fields})


def _params_and_grads(score: str):
  """A tiny model's parameters and a gradient of global norm 4 x the clip (so it is clipped)."""
  config = tiny_config.config(model__score=score, model__vocab_size=30).model
  params = models.trainable(models.init(jax.random.key(0), config))
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(1), len(leaves))
  grads = [jax.random.normal(k, x.shape) for k, x in zip(keys, leaves)]
  norm = jnp.sqrt(sum(jnp.sum(g * g) for g in grads))
  return params, jax.tree.unflatten(tree, [g * (4 * GRAD_CLIP / norm) for g in grads])


@pytest.mark.parametrize("factor", [1.0, 0.1])
def test_a_step_is_clipped_sgd_with_the_output_layers_own_learning_rate(factor):
  """theta <- theta - lr * g * clip / |g| for every parameter, times `factor` for params["head"]."""
  params, grads = _params_and_grads("proj")
  optimizer = steps.make_optimizer(_train_config(head_lr_factor=factor))
  updates, _ = optimizer.update(grads, optimizer.init(params), params)
  for name in params:
    expected = jax.tree.map(
        lambda g: -LEARNING_RATE * (factor if name == models.HEAD else 1.0) * g / 4,
        grads[name])
    for got, want in zip(jax.tree.leaves(updates[name]), jax.tree.leaves(expected)):
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-9)


def test_the_factor_changes_the_output_layers_steps_and_nothing_else():
  params, grads = _params_and_grads("single")
  steps_by_factor = {}
  for factor in (1.0, 0.1):
    optimizer = steps.make_optimizer(_train_config(head_lr_factor=factor))
    steps_by_factor[factor] = optimizer.update(grads, optimizer.init(params), params)
  (papers, state), (scaled, scaled_state) = steps_by_factor[1.0], steps_by_factor[0.1]
  assert set(papers) == set(scaled) and models.HEAD in papers and "score" in papers
  for name in papers:
    for a, b in zip(jax.tree.leaves(papers[name]), jax.tree.leaves(scaled[name])):
      if name == models.HEAD:
        np.testing.assert_allclose(b, 0.1 * a, rtol=1e-6)
      else:
        np.testing.assert_array_equal(a, b)
  # The optimizer state is the same, so a checkpoint resumes under another factor.
  assert jax.tree.structure(state) == jax.tree.structure(scaled_state)
  for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(scaled_state)):
    np.testing.assert_array_equal(a, b)


def test_a_saved_train_config_without_the_field_trains_as_the_papers_do():
  """Runs saved before `head_lr_factor` existed (no such field) step as with 1.0."""
  params, grads = _params_and_grads("proj")
  steps_taken = []
  for train_config in (_train_config(), _train_config(head_lr_factor=1.0)):
    optimizer = steps.make_optimizer(train_config)
    state = optimizer.init(params)
    state.hyperparams["learning_rate"] = jnp.asarray(0.25)   # As the training step sets it.
    steps_taken.append(optimizer.update(grads, state, params))
  for a, b in zip(jax.tree.leaves(steps_taken[0]), jax.tree.leaves(steps_taken[1])):
    np.testing.assert_array_equal(a, b)
  np.testing.assert_allclose(steps_taken[0][0]["out_bias"], -0.25 * grads["out_bias"] / 4,
                             rtol=1e-5)


@pytest.mark.parametrize("score, factor, error", [
    ("proj", 0.0, "head_lr_factor = 0.0 must be positive"),
    ("single", -0.1, "head_lr_factor = -0.1 must be positive"),
    ("none", 0.1, "output layer h'_t, which config.model.score='none' does not have"),
    ("lstmn", 0.5, "output layer h'_t, which config.model.score='lstmn' does not have"),
])
def test_a_factor_that_cannot_apply_is_refused_in_one_line(score, factor, error):
  config = tiny_config.config(model__score=score, model__vocab_size=50,
                              train__head_lr_factor=factor)
  with pytest.raises(ConfigError, match=error):
    run_config.check_training(config)


def test_the_factor_is_accepted_for_every_score_with_an_output_layer():
  for score in ("proj", "single", "combined", "average"):
    config = tiny_config.config(model__score=score, model__vocab_size=50,
                                train__head_lr_factor=0.1)
    run_config.check_training(config)
