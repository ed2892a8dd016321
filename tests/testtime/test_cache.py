"""The neural cache (Grave et al. 2017): its equation token by token, the hidden states it
keeps, its grid search on valid, causality, bad settings."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlm_jax.common import errors
from attnlm_jax import data as data_lib
from attnlm_jax.evaluation import evaluate
from attnlm_jax import models
from attnlm_jax.testtime import cache
import tiny_config


def direct_cache(hidden, words, model_log_probs, size, theta, lam):
  """Grave et al. (2017) eqs. 2-4 token by token in NumPy (float64): the model alone at the
  first step, whose cache is empty."""
  hidden = hidden.astype(np.float64)
  result = []
  for t in range(len(words)):
    keys = range(max(0, t - size), t)
    if not keys:
      result.append(model_log_probs[t])
      continue
    weights = np.exp([theta * hidden[t] @ hidden[i] for i in keys])
    p_cache = sum(w for w, i in zip(weights, keys) if words[i] == words[t]) / weights.sum()
    result.append(np.log((1 - lam) * np.exp(model_log_probs[t]) + lam * p_cache))
  return np.array(result)


def test_split_states_are_evaluations_log_probs_and_each_sentences_hidden_states(
    model, valid_states):
  tokens, log_probs, hidden = valid_states
  np.testing.assert_array_equal(tokens, model.data.split("valid").tokens)
  assert -log_probs.sum() == pytest.approx(evaluate.evaluate(model, "valid")["nll"], rel=1e-5)
  data = data_lib.load(model.config.data, model.vocab)
  start = 0
  for sentence in data.sentences("valid")[:3]:
    inputs = jnp.asarray(np.concatenate([[data_lib.EOS_ID], sentence[:-1]])[None], jnp.int32)
    _, states = models.apply(model.params, model.config.model, inputs,
                             jnp.array([len(sentence)]), return_hidden=True)
    np.testing.assert_allclose(hidden[start:start + len(sentence)], states[0], atol=1e-5)
    start += len(sentence)


def test_return_hidden_is_the_output_layers_input(model):
  config = model.config.model.copy_and_resolve_references()
  config.score = "none"
  params = models.init(jax.random.key(1), config)
  tokens, lengths = jnp.array([[1, 5, 7, 9]]), jnp.array([4])
  logits, hidden = models.apply(params, config, tokens, lengths, return_hidden=True)
  np.testing.assert_allclose(logits, hidden @ params["embed"].T + params["out_bias"],
                             atol=1e-5)                 # `none`: h'_t = h_t, tied softmax
  logits, weights, hidden = models.apply(model.params, model.config.model, tokens, lengths,
                                         return_attention=True, return_hidden=True)
  assert weights.shape == (1, 4, 4) and hidden.shape == (1, 4, config.hidden_size)
  # `single`: its output layer's h'_t = tanh(W_h h_t + W_c c_t + b) is the softmax's input.
  _, head = models.apply(model.params, model.config.model, tokens, lengths,
                         return_hidden=True, hidden="head")
  np.testing.assert_allclose(logits, head @ model.params["embed"].T
                             + model.params["out_bias"], atol=1e-5)
  assert not np.allclose(head, hidden)
  with pytest.raises(errors.ConfigError, match="unknown hidden states 'h2'"):
    models.apply(params, config, tokens, lengths, return_hidden=True, hidden="h2")


@pytest.mark.parametrize("score", tuple(models.SCORE_FUNCTIONS))
def test_return_hidden_is_the_last_layers_state_for_every_score(model, score):
  config = model.config.model.copy_and_resolve_references()
  config.update(score=score, vocab_size=30, num_layers=2)
  params = models.init(jax.random.key(2), config)
  tokens = jnp.array([[1, 5, 7, 9, 3]])
  _, hidden = models.apply(params, config, tokens, jnp.array([5]), return_hidden=True)
  state = models.init_state(params, config, 1, capacity=8)
  for t in range(5):
    _, state = models.step(params, config, state, tokens[:, t])
    np.testing.assert_allclose(hidden[0, t], state.lstm[-1].h[0], atol=1e-5)


@pytest.mark.parametrize("size", [1, 40, 300])
def test_cache_equals_its_equation_token_by_token(valid_states, size):
  tokens, log_probs, hidden = (x[:600] for x in valid_states)   # 3 blocks of 256 queries
  cache_log_probs, filled = cache.cache_log_probs(hidden, tokens, size, theta=0.3)
  assert not filled[0] and filled[1:].all()
  mixed = cache.mix(log_probs, cache_log_probs, filled, 0.2)
  np.testing.assert_allclose(mixed, direct_cache(hidden, tokens, log_probs, size, 0.3, 0.2),
                             rtol=1e-5)


def test_the_cache_over_the_output_layers_states(model):
  """With `states="head"` the cache keeps and queries h'_t: for `none`, whose output layer is
  the identity, the same result as over h_t; for `single` its equation over h'_t."""
  baseline = tiny_config.untrained_model(model__score="none")
  over = {states: cache.evaluate_split(baseline, "valid", 40, theta=0.3, lam=0.2,
                                       states=states) for states in models.HIDDEN_STATES}
  assert over["head"]["cache_states"] == "head" and over["lstm"]["cache_states"] == "lstm"
  assert over["head"]["perplexity"] == over["lstm"]["perplexity"]
  tokens, log_probs, head = (x[:300] for x in cache.split_states(model, "valid", "head"))
  assert not np.allclose(head, cache.split_states(model, "valid")[2][:300])
  cache_log_probs, filled = cache.cache_log_probs(head, tokens, 40, theta=0.3)
  np.testing.assert_allclose(cache.mix(log_probs, cache_log_probs, filled, 0.2),
                             direct_cache(head, tokens, log_probs, 40, 0.3, 0.2), rtol=1e-5)


def test_lambda_zero_gives_the_models_own_perplexity(model):
  result = cache.evaluate_split(model, "valid", 50, theta=0.3, lam=0.0)
  assert result["perplexity"] == result["model_perplexity"]
  assert (result["perplexity_paper_convention"]
          == result["model_perplexity_paper_convention"])
  plain = evaluate.evaluate(model, "valid")
  assert result["perplexity"] == pytest.approx(plain["perplexity"], rel=1e-6)
  assert result["fitted_on"] is None and result["grid"] == []


def test_cache_grid_is_searched_on_valid_and_its_best_point_applied(model, monkeypatch):
  monkeypatch.setattr(cache, "THETAS", (0.0, 0.3))
  monkeypatch.setattr(cache, "LAMBDAS", (0.0, 0.2))
  result = cache.evaluate_split(model, "test", 50, extensions=0)
  assert result["fitted_on"] == "valid" and len(result["grid"]) == 4
  best = min(result["grid"], key=lambda point: point["perplexity"])
  assert (result["cache_theta"], result["cache_lambda"]) == (best["theta"], best["lambda"])
  fixed = cache.evaluate_split(model, "test", 50, theta=best["theta"], lam=best["lambda"])
  assert fixed["perplexity"] == result["perplexity"]
  assert result["perplexity"] < result["model_perplexity"]     # it learns the repetitions


def test_cache_search_steps_past_the_edge_its_best_point_lies_on(model, monkeypatch):
  """A grid too small for the cache of a corpus of repetitions: its best point lies on its
  top edges, so the search goes on past them, one axis at a time from the best point so far,
  and chooses the best of every point it evaluated."""
  monkeypatch.setattr(cache, "THETAS", (0.0, 0.3))
  monkeypatch.setattr(cache, "LAMBDAS", (0.0, 0.05))
  grid_only = cache.evaluate_split(model, "valid", 50, extensions=0)
  assert grid_only["cache_lambda"] == 0.05
  result = cache.evaluate_split(model, "valid", 50)
  searched = result["grid"][:4]
  assert searched == grid_only["grid"]
  for point in result["grid"][4:]:
    best = min(searched, key=lambda p: p["perplexity"])
    (axis,) = [axis for axis in ("theta", "lambda") if point[axis] != best[axis]]
    assert not min(p[axis] for p in searched) <= point[axis] <= max(p[axis] for p in searched)
    searched.append(point)
  assert max(p["lambda"] for p in searched) > 0.05
  best = min(searched, key=lambda p: p["perplexity"])
  assert (result["cache_theta"], result["cache_lambda"]) == (best["theta"], best["lambda"])
  assert result["perplexity"] == best["perplexity"] < grid_only["perplexity"]


def test_cache_is_causal():
  rng = np.random.default_rng(0)
  hidden, words = rng.normal(size=(700, 8)), rng.integers(0, 20, 700)
  before, filled = cache.cache_log_probs(hidden, words, 100, theta=0.5)
  before_words = words.copy()
  later = 400
  words[later:] = rng.integers(0, 20, 300)        # a later word changes, and every h after it
  hidden[later + 1:] = rng.normal(size=(299, 8))
  after, _ = cache.cache_log_probs(hidden, words, 100, theta=0.5)
  np.testing.assert_array_equal(after[:later], before[:later])
  unchanged = np.flatnonzero(words[later + 1:] == np.asarray(before_words)[later + 1:]) + later + 1
  assert not np.allclose(after[unchanged], before[unchanged])  # the same words, a new history


def test_the_stream_protocol_cache_reads_evaluations_windows():
  model = tiny_config.untrained_model(model__score="none", data__span="stream", data__bucket=False)
  tokens, log_probs, hidden = cache.split_states(model, "valid")
  assert -log_probs.sum() == pytest.approx(evaluate.evaluate(model, "valid")["nll"], rel=1e-5)
  assert np.abs(hidden).sum(axis=1).min() > 0        # every token got its state
  result = cache.evaluate_split(model, "valid", 50, theta=0.3, lam=0.0)
  assert result["perplexity"] == pytest.approx(
      evaluate.evaluate(model, "valid")["perplexity"], rel=1e-6)
  assert len(tokens) == result["tokens"]


@pytest.mark.parametrize("size, theta, lam, message", [
    (0, None, None, "at least 1"), (10, -1.0, None, "--cache_theta=-1.0 must be a number >= 0"),
    (10, float("inf"), None, "--cache_theta=inf must be a number >= 0"),
    (10, None, 1.0, "--cache_lambda=1.0 must be in [0, 1)")])
def test_bad_cache_settings_are_refused(size, theta, lam, message):
  with pytest.raises(cache.CacheError, match=message.replace("[", r"\[").replace(")", r"\)")):
    cache.check(size, theta, lam)
  with pytest.raises(cache.CacheError, match="--cache_states=h2: choose lstm or head"):
    cache.check(10, None, None, "h2")
