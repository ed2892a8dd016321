"""Test-time methods: the neural cache and dynamic evaluation against their equations,
their causality, the command line and the page of a table (`--mode=testtime`)."""

import itertools
import json
import logging
import math
import re
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlm_jax import cache
from attnlm_jax import data as data_lib
from attnlm_jax import dynamic_eval
from attnlm_jax import evaluate
from attnlm_jax import grid_search
from attnlm_jax import models
from attnlm_jax import results
from attnlm_jax import testtime
from attnlm_jax import train
from attnlm_jax.data import pipeline
import tiny_config


def tiny_model(**overrides) -> evaluate.TrainedModel:
  """Untrained parameters of the tiny config on the embedded corpus, drawn U(-0.5, 0.5) so
  that the hidden states differ visibly from one step to the next."""
  config = tiny_config.config(model__init_scale=0.5, **overrides)
  vocab = data_lib.load(config.data).vocab
  config.model.vocab_size = len(vocab)
  return evaluate.TrainedModel(config, vocab, models.init(jax.random.key(0), config.model), 0)


@pytest.fixture(scope="module")
def model():
  return tiny_model(model__score="single")


@pytest.fixture(scope="module")
def valid_states(model):
  return cache.split_states(model, "valid")


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
  reference_tokens, reference = evaluate.split_log_probs(model, "valid")
  np.testing.assert_array_equal(tokens, reference_tokens)
  np.testing.assert_array_equal(log_probs, reference)
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
  with pytest.raises(models.ConfigError, match="unknown hidden states 'h2'"):
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
  baseline = tiny_model(model__score="none")
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
  later = 400
  words[later:] = rng.integers(0, 20, 300)        # a later word changes, and every h after it
  hidden[later + 1:] = rng.normal(size=(299, 8))
  after, _ = cache.cache_log_probs(hidden, words, 100, theta=0.5)
  np.testing.assert_array_equal(after[:later], before[:later])
  assert not np.array_equal(after[later:], before[later:])


def test_the_stream_protocol_cache_reads_evaluations_windows():
  model = tiny_model(model__score="none", data__span="stream", data__bucket=False)
  tokens, log_probs, hidden = cache.split_states(model, "valid")
  np.testing.assert_array_equal(log_probs, evaluate.split_log_probs(model, "valid")[1])
  assert np.abs(hidden).sum(axis=1).min() > 0        # every token got its state
  result = cache.evaluate_split(model, "valid", 50, theta=0.3, lam=0.0)
  assert result["perplexity"] == pytest.approx(
      evaluate.evaluate(model, "valid")["perplexity"], rel=1e-6)
  assert len(tokens) == result["tokens"]


@pytest.mark.parametrize("size, theta, lam, message", [
    (0, None, None, "at least 1"), (10, -1.0, None, "--cache_theta=-1.0 must be >= 0"),
    (10, None, 1.0, "--cache_lambda=1.0 must be in [0, 1)")])
def test_bad_cache_settings_are_refused(size, theta, lam, message):
  with pytest.raises(cache.CacheError, match=message.replace("[", r"\[").replace(")", r"\)")):
    cache.check(size, theta, lam)
  with pytest.raises(cache.CacheError, match="--cache_states=h2: choose lstm or head"):
    cache.check(10, None, None, "h2")


# --------------------------------------------------------------------------- dynamic


def test_update_rule_by_hand():
  step = lambda decay: float(dynamic_eval.update(1.0, 2.0, 0.5, 4.0, 3.0, 0.1, decay))
  assert step(0.1) == pytest.approx(1.0 - 0.1 * 2.0 / 4.0 + 0.3 * (0.5 - 1.0))
  assert step(0.5) == pytest.approx(1.0 - 0.1 * 2.0 / 4.0 + 1.0 * (0.5 - 1.0))  # clipped at 1


def test_dynamic_evaluation_with_learning_rate_zero_is_plain_evaluation(model):
  evaluator = dynamic_eval.DynamicEvaluator(model, window=40)
  reference = evaluate.split_log_probs(model, "valid")[1]
  still = evaluator.split_log_probs("valid", evaluator.rule("sgd"), 0.0, 0.01)
  np.testing.assert_allclose(still, reference, atol=1e-5)
  np.testing.assert_allclose(evaluator.split_log_probs("valid"), reference, atol=1e-5)
  adapted = evaluator.split_log_probs("valid", evaluator.rule("sgd"), 0.3, 0.0)
  assert adapted.sum() > reference.sum() + 100      # the untrained model learns a lot


def test_a_windows_padding_in_time_changes_no_log_prob(model):
  """Windows of two sentences padded to a multiple of 1 (none beyond the longer sentence)
  and of 16 give the same dynamic evaluation; each is as wide as its multiple asks."""
  found = {}
  for multiple in (1, 16):
    evaluator = dynamic_eval.DynamicEvaluator(model, window=2, time_multiple=multiple)
    for window in evaluator.windows("valid"):
      longest = int(window.batch["lengths"].max())
      assert window.batch["inputs"].shape[1] == -(-longest // multiple) * multiple
    found[multiple] = evaluator.split_log_probs("valid", evaluator.rule("sgd"), 0.5, 0.01)
  assert np.all(np.isfinite(found[1]))
  np.testing.assert_allclose(found[1], found[16], atol=1e-5)


def test_a_pass_sure_to_diverge_ends_early_and_still_counts_as_diverged(model, monkeypatch,
                                                                          caplog):
  evaluator = dynamic_eval.DynamicEvaluator(model)
  rule, tokens = evaluator.rule("sgd"), evaluator.data.split("valid").tokens
  adapt, steps = evaluator._adapt, []
  monkeypatch.setattr(evaluator, "_adapt", lambda *args: steps.append(1) or adapt(*args))
  with caplog.at_level(logging.INFO):
    ended = evaluator.split_log_probs("valid", rule, 10.0, 0.0)
  assert len(steps) % dynamic_eval.DIVERGENCE_CHECK_EVERY == 0
  assert len(steps) < len(evaluator.windows("valid")) / 10
  scored = ~np.isnan(ended)
  assert scored[0] and not scored[-1]
  # The log names where the adapted model first scored worse than a uniform guess: the first
  # check whose windows' mean NLL is above log V, found here from the log-probs themselves.
  every = dynamic_eval.DIVERGENCE_CHECK_EVERY
  window_of = np.concatenate([np.full(int(w.batch["lengths"].sum()), i)
                              for i, w in enumerate(evaluator.windows("valid"))])
  group_nll = [-ended[window_of // every == g].mean() for g in range(len(steps) // every)]
  broke = every * (1 + next(g for g, x in enumerate(group_nll)
                            if not x <= np.log(model.config.model.vocab_size)))
  assert (f"diverged by window {len(steps)} of {len(evaluator.windows('valid'))} (scoring "
          f"worse than a uniform guess over the vocabulary by window {broke})") in caplog.text
  monkeypatch.setattr(dynamic_eval, "DIVERGENCE_CHECK_EVERY", 10**9)   # the whole pass
  whole = evaluator.split_log_probs("valid", rule, 10.0, 0.0)
  assert len(steps) > len(evaluator.windows("valid"))
  np.testing.assert_array_equal(ended[scored], whole[scored])
  assert -whole.mean() > dynamic_eval.DIVERGED_MEAN_NLL
  assert (dynamic_eval.perplexities(tokens, ended) == dynamic_eval.perplexities(tokens, whole)
          == {"perplexity": math.inf, "perplexity_paper_convention": math.inf})


def test_stream_protocol_dynamic_evaluation_reads_the_split_as_one_stream():
  model = tiny_model(model__score="none", data__span="stream", data__bucket=False)
  evaluator = dynamic_eval.DynamicEvaluator(model)
  tokens = evaluator.data.split("valid").tokens
  inputs = jnp.asarray(np.concatenate([[data_lib.EOS_ID], tokens[:-1]])[None], jnp.int32)
  logits = models.apply(model.params, model.config.model, inputs, jnp.array([len(tokens)]))
  whole = np.asarray(jax.nn.log_softmax(logits[0]))[np.arange(len(tokens)), tokens]
  np.testing.assert_allclose(evaluator.split_log_probs("valid"), whole, atol=1e-4)
  np.testing.assert_allclose(evaluator.split_log_probs("valid", evaluator.rule("sgd"), 0.0,
                                                       0.0), whole, atol=1e-4)


@pytest.mark.parametrize("score", ["single", "das_lstmn"])
def test_dynamic_evaluation_is_causal(score):
  model = tiny_model(model__score=score)
  data = data_lib.load(model.config.data, model.vocab)
  text = data_lib.SplitText([tuple(model.vocab.decode(s[:-1])) for s in
                             data.sentences("valid")[:12]], [0] * 12)
  evaluator = dynamic_eval.DynamicEvaluator(model, window=2)
  rule = evaluator.rule("sgd")

  def log_probs(split_text):
    stream = pipeline.encode_split(split_text, model.vocab)
    windows = list(dynamic_eval.unit_windows(
        stream, (np.cumsum(stream.sentence_lengths) - stream.sentence_lengths,
                 stream.sentence_lengths), 2))
    return stream, evaluator.log_probs(windows, len(stream.tokens), rule, 0.5, 0.01)

  stream, before = log_probs(text)
  changed = list(text.sentences)
  word = next(w for w in model.vocab.words[4:] if w != changed[7][2])
  changed[7] = changed[7][:2] + (word,) + changed[7][3:]
  _, after = log_probs(data_lib.SplitText(changed, text.documents))
  later = int(stream.sentence_lengths[:7].sum()) + 2     # the changed word's position
  np.testing.assert_array_equal(after[:later], before[:later])
  first_after = int(stream.sentence_lengths[:8].sum())   # the windows after its own
  assert np.abs(after[first_after:] - before[first_after:]).max() > 1e-4


def _squared_embedding_gradient(model, batch):
  """The square of the embedding's gradient of a batch's mean NLL, computed directly."""
  def loss(embed):
    logits = models.apply({**model.params, "embed": embed}, model.config.model,
                          batch["inputs"], batch["lengths"])
    mask = jnp.arange(logits.shape[1])[None] < batch["lengths"][:, None]
    log_probs = jax.nn.log_softmax(logits)
    picked = jnp.take_along_axis(log_probs, batch["targets"][..., None], -1)[..., 0]
    return -jnp.where(mask, picked, 0).sum() / mask.sum()
  return jax.grad(loss)(model.params["embed"]) ** 2


def _train_batches(model):
  data = data_lib.load(model.config.data, model.vocab)
  return list(data.eval_batches("train", model.config.data.eval_batch_size))


def test_rms_rule_divides_by_the_training_gradients_root_mean_square(model, monkeypatch):
  monkeypatch.setattr(dynamic_eval, "STAT_BATCHES", 2)
  evaluator = dynamic_eval.DynamicEvaluator(model)
  rms = evaluator.gradient_rms()
  batches = _train_batches(model)
  squares = sum(_squared_embedding_gradient(model, batch)
                for batch in (batches[0], batches[-1]))   # evenly spaced: first and last
  np.testing.assert_allclose(rms["embed"], np.sqrt(squares / 2), rtol=1e-4, atol=1e-9)
  rule = evaluator.rule("rms")
  np.testing.assert_allclose(rule.denominator["embed"], rms["embed"] + dynamic_eval.EPSILON)
  means = [np.mean(leaf) for leaf in jax.tree.leaves(rule.decay_scale)]
  assert np.mean(means) == pytest.approx(1.0, rel=1e-5)


def test_rms_statistics_average_over_every_training_batch(model):
  """By default MS_g takes every training batch (Krause et al.'s code), and the RMS result
  says how many."""
  batches = _train_batches(model)
  assert len(batches) > 2
  evaluator = dynamic_eval.DynamicEvaluator(model)
  squares = sum(_squared_embedding_gradient(model, batch) for batch in batches)
  np.testing.assert_allclose(evaluator.gradient_rms()["embed"],
                             np.sqrt(squares / len(batches)), rtol=1e-4, atol=1e-9)
  result = dynamic_eval.evaluate_split(model, "valid", "rms", learning_rate=1e-4, decay=0.01)
  assert result["gradient_batches"] == len(batches)


def test_dynamic_grid_is_searched_on_valid(model, monkeypatch):
  monkeypatch.setattr(dynamic_eval, "GRIDS", {"sgd": {"learning_rate": (0.0, 0.3),
                                                      "decay": (0.0,)}})
  result = dynamic_eval.evaluate_split(model, "test", "sgd", window=50, extensions=0)
  assert result["fitted_on"] == "valid" and len(result["grid"]) == 2
  assert result["learning_rate"] == 0.3 and result["decay"] == 0.0
  assert result["grid"][0]["perplexity"] == pytest.approx(
      evaluate.evaluate(model, "valid")["perplexity"], rel=1e-5)
  assert result["perplexity"] < result["model_perplexity"]
  assert (result["window"], result["window_unit"]) == (50, "sentences")


def test_bad_dynamic_settings_are_refused(model):
  with pytest.raises(dynamic_eval.DynamicEvalError, match="--dynamic=adam is unknown"):
    dynamic_eval.check("adam", None, None)
  with pytest.raises(dynamic_eval.DynamicEvalError, match="--dynamic_lr=-1.0 must be"):
    dynamic_eval.check("sgd", -1.0, None)
  with pytest.raises(dynamic_eval.DynamicEvalError, match="--dynamic_window=0"):
    dynamic_eval.DynamicEvaluator(model, window=0)


# --------------------------------------------------------------------------- the page, CLI


@pytest.fixture(scope="module")
def table_dir(tmp_path_factory):
  """A table directory of the `demo` table with its row `none` trained (1 tiny epoch)."""
  path = tmp_path_factory.mktemp("demo_table")
  train.train_and_evaluate(tiny_config.config(model__score="none", train__num_epochs=1),
                           path / "none")
  return path


def _main(*args):
  return subprocess.run([sys.executable, "-m", "attnlm_jax.main", *map(str, args)],
                        cwd=tiny_config.REPO, capture_output=True, text=True, timeout=300)


def test_page_of_a_table(table_dir, monkeypatch):
  monkeypatch.setattr(cache, "THETAS", (0.0, 0.3))
  monkeypatch.setattr(cache, "LAMBDAS", (0.0, 0.1))
  monkeypatch.setattr(dynamic_eval, "GRIDS", {"sgd": {"learning_rate": (0.1,), "decay": (0.0,)},
                                              "rms": {"learning_rate": (1e-4,),
                                                      "decay": (0.01,)}})
  monkeypatch.setattr(dynamic_eval, "STAT_BATCHES", 2)
  summary = testtime.run("demo", table_dir, cache_size=100, dynamic_window=100)
  assert summary["evaluated"] == ["none"]
  assert summary["rows"] == {"none": "finished", "single": "not started"}
  page = json.loads((table_dir / testtime.PAGE_JSON).read_text())
  none = page["rows"][0]["results"]
  assert {"cache", "dynamic_sgd", "dynamic_rms"} <= none.keys()
  assert none["cache"]["split"] == "test" and none["cache"]["cache_size"] == 100
  assert none["dynamic_sgd"]["model_perplexity"] == pytest.approx(
      page["rows"][0]["test_perplexity"], rel=1e-5)
  text = (table_dir / testtime.PAGE_MD).read_text()
  assert "| none |" in text and "| single | - / - | not started |" in text
  assert "--mode=testtime --table=demo" in text and "--grid_extensions=3" in text
  assert "MS_g averages over (docs/testtime.md): `none` 2." in text   # STAT_BATCHES
  assert ("| GluonNLP, cache_language_model | standard_lstm_lm_650 (2 x 650, tied) | "
          "WikiText-2 | 93.9 | 67.31 | - | 2,000 words, theta 0.662, lambda 0.1279 |") in text
  assert "| AWD-LSTM | Penn Treebank | 57.3 | 52.8 | 51.1 | - |" in text
  assert len(page["anchors"]) == len(testtime.ANCHORS)
  assert page["grid_extensions"] == none["grid_extensions"] == grid_search.EXTENSIONS
  assert testtime.run("demo", table_dir, cache_size=100,
                      dynamic_window=100)["evaluated"] == []        # reused
  monkeypatch.setattr(cache, "LAMBDAS", (0.0, 0.2))                 # another grid
  assert testtime.run("demo", table_dir, cache_size=100,
                      dynamic_window=100)["evaluated"] == ["none"]
  again = json.loads((table_dir / testtime.PAGE_JSON).read_text())["rows"][0]["results"]
  assert [p["lambda"] for p in again["cache"]["grid"][:4]] == [0.0, 0.2, 0.0, 0.2]
  assert testtime.run("demo", table_dir, cache_size=100, dynamic_window=100,
                      grid_extensions=0)["evaluated"] == ["none"]   # the grid alone
  alone = json.loads((table_dir / testtime.PAGE_JSON).read_text())["rows"][0]["results"]
  assert "grid_extensions" not in alone and len(alone["cache"]["grid"]) == 4


def test_a_rows_cache_over_the_output_layers_states_is_shown_beside_the_page(
    table_dir, tmp_path, monkeypatch):
  monkeypatch.setattr(cache, "THETAS", (0.0, 0.3))
  monkeypatch.setattr(cache, "LAMBDAS", (0.0, 0.1))
  shutil.copytree(table_dir, tmp_path, dirs_exist_ok=True)
  head = cache.evaluate_split(evaluate.load(tmp_path / "none"), "test", 100, extensions=0,
                              states="head")
  (tmp_path / "none" / testtime.HEAD_CACHE_FILE).write_text(json.dumps(head))
  monkeypatch.setattr(testtime, "row_results", tiny_config.must_not_run)
  testtime.run("demo", tmp_path, rows=["single"], cache_size=100, dynamic_window=100)
  row = json.loads((tmp_path / testtime.PAGE_JSON).read_text())["rows"][0]
  best = min(head["grid"], key=lambda point: point["perplexity"])
  assert row["cache_head"]["valid_perplexity"] == best["perplexity"]
  assert row["cache_head"]["perplexity"] == head["perplexity"] and "grid" not in row["cache_head"]
  text = (tmp_path / testtime.PAGE_MD).read_text()
  number = results.format_number
  assert (f"| none | 100 | {number(best['perplexity'])} / {number(head['perplexity'])} | "
          f"{number(best['perplexity_paper_convention'])} / "
          f"{number(head['perplexity_paper_convention'])} | {head['cache_theta']:g}, "
          f"{head['cache_lambda']:g} |") in text.splitlines()
  (tmp_path / "none" / testtime.HEAD_CACHE_FILE).write_text(json.dumps({**head,
                                                                        "cache_states": "lstm"}))
  result = _main("--mode=testtime", "--table=demo", f"--workdir={tmp_path}", "--rows=single")
  assert result.returncode == 1
  assert result.stderr.strip().splitlines() == [
      f"error: {tmp_path / 'none' / testtime.HEAD_CACHE_FILE} is not a cache over the output "
      "layer's h'_t: make it with --mode=evaluate --split=test --cache=SIZE "
      "--cache_states=head"]


class Stopped(Exception):
  """A stand-in for the end of a session."""


def test_a_row_stopped_part_way_goes_on_from_its_last_pass(table_dir, tmp_path, monkeypatch):
  monkeypatch.setattr(cache, "THETAS", (0.0, 0.3))
  monkeypatch.setattr(cache, "LAMBDAS", (0.0, 0.1))
  monkeypatch.setattr(dynamic_eval, "GRIDS", {"sgd": {"learning_rate": (0.1, 0.3), "decay": (0.0,)},
                                              "rms": {"learning_rate": (1e-4,),
                                                      "decay": (0.01,)}})
  monkeypatch.setattr(dynamic_eval, "STAT_BATCHES", 2)
  for name in ("stopped", "whole"):
    shutil.copytree(table_dir / "none", tmp_path / name / "none",
                    ignore=shutil.ignore_patterns("testtime*"))
  made, stop_at, make_pass = [], [3], dynamic_eval.DynamicEvaluator.split_log_probs

  def counted(self, split, rule=None, *args):
    made.append(split)
    if len(made) == stop_at[0]:
      raise Stopped
    return make_pass(self, split, rule, *args)

  monkeypatch.setattr(dynamic_eval.DynamicEvaluator, "split_log_probs", counted)
  run = lambda name, size=100: testtime.run("demo", tmp_path / name, cache_size=size,
                                             dynamic_window=100, grid_extensions=0)
  with pytest.raises(Stopped):  # in SGD's pass over test, after its two over valid
    run("stopped")
  progress = tmp_path / "stopped" / "none" / testtime.PROGRESS_FILE
  entries = json.loads(progress.read_text())["entries"]
  assert sorted(entries) == ["cache", "valid dynamic_sgd lr 0.1 decay 0.0",
                             "valid dynamic_sgd lr 0.3 decay 0.0"]
  # The page, written while the row is evaluated elsewhere, shows what it has made so far.
  assert testtime.run("demo", tmp_path / "stopped", rows=["single"], cache_size=100,
                      dynamic_window=100, grid_extensions=0)["evaluated"] == []
  row = json.loads((tmp_path / "stopped" / testtime.PAGE_JSON).read_text())["rows"][0]
  assert row["results"] is None and row["in_progress"]["passes"] == 2
  cached = row["in_progress"]["cache"]
  assert cached == entries["cache"]
  valid = min(point["perplexity"] for point in cached["grid"])
  lines = (tmp_path / "stopped" / testtime.PAGE_MD).read_text().splitlines()
  assert (f"| none | {results.format_number(row['valid_perplexity'])} / "
          f"{results.format_number(row['test_perplexity'])} | "
          f"{results.format_number(valid)} / {results.format_number(cached['perplexity'])} | "
          "evaluating (2 passes made) | evaluating (2 passes made) |") in lines
  assert f"| none | {cached['cache_theta']:g}, {cached['cache_lambda']:g} | - | - |" in lines
  made.clear()
  stop_at[0] = 0
  run("stopped")
  # The four passes left: SGD's over test and the static one (made once for both rules),
  # then RMS's over valid and over test.
  assert made == ["test", "test", "valid", "test"]
  assert not progress.exists()
  made.clear()
  run("whole")
  assert len(made) == 6
  row_file = lambda name: json.loads((tmp_path / name / "none" / testtime.ROW_FILE).read_text())
  assert row_file("stopped") == row_file("whole")
  made.clear()
  stop_at[0] = 2
  with pytest.raises(Stopped):
    run("whole", size=50)
  made.clear()
  stop_at[0] = 0
  run("whole", size=60)   # progress made with another cache size is not taken
  assert len(made) == 6
  made.clear()
  stop_at[0] = 2
  monkeypatch.setattr(dynamic_eval, "STAT_BATCHES", 3)
  with pytest.raises(Stopped):
    run("whole", size=70)
  made.clear()
  stop_at[0] = 0
  monkeypatch.setattr(dynamic_eval, "STAT_BATCHES", 2)
  run("whole", size=70)   # nor progress made with another MS_g
  assert len(made) == 6


def test_choices_at_the_edges_of_the_values_searched_are_named():
  grids = {"cache": {"theta": [0.0, 0.5, 1.0], "lambda": [0.0, 0.1, 0.2]},
           "dynamic_sgd": {"learning_rate": [0.1, 1.0], "decay": [0.0, 0.1]},
           "dynamic_rms": {"learning_rate": [1e-4, 1e-3], "decay": [0.01]}}

  def searched(method, **past):
    """The grid's points and the points past its edges (one axis changed each)."""
    axes = grids[method]
    points = [dict(zip(axes, values)) for values in itertools.product(*axes.values())]
    return points + [{**points[0], axis: value} for axis, value in past.items()]

  chosen = {"grids": grids,
            "cache": {"cache_theta": 1.4, "cache_lambda": 0.0,
                      "grid": searched("cache", theta=1.4)},
            "dynamic_sgd": {"learning_rate": 0.1, "decay": 0.0,
                            "grid": searched("dynamic_sgd", learning_rate=0.033)},
            "dynamic_rms": {"learning_rate": 1e-4, "decay": 0.01,
                            "grid": searched("dynamic_rms")}}
  # theta at the top of the values searched (the grid and 1.4 past it); SGD's 0.1 is inside
  # them (0.033 was searched); lambda 0 and decay 0 are bounds, not edges; a one-point grid
  # has none.
  assert testtime.edge_choices(chosen) == ["cache theta 1.4, the largest of 0, 0.5, 1, 1.4",
                                           "RMS learning rate 0.0001, the smallest of "
                                           "0.0001, 0.001"]
  page = {"table": "demo", "title": "t", "command": "c", "date": "d", "cache_size": 2000,
          "rows": [{"name": "none", "status": "finished", "results": None},
                   {"name": "single", "status": "finished", "results": chosen}]}
  assert testtime._edge_notes(page["rows"]) == [
      "Chosen at an edge of the values searched (the best point may lie beyond it):", "",
      "- `single`: cache theta 1.4, the largest of 0, 0.5, 1, 1.4; RMS learning rate 0.0001, "
      "the smallest of 0.0001, 0.001.", ""]


def test_a_method_that_diverges_at_every_grid_point_reads_diverged(model, monkeypatch):
  monkeypatch.setattr(dynamic_eval, "GRIDS", {"sgd": {"learning_rate": (1e6,),
                                                      "decay": (0.0,)}})
  diverged = dynamic_eval.evaluate_split(model, "test", "sgd", window=50)
  assert diverged["grid"][0]["perplexity"] == diverged["perplexity"] == math.inf
  cached = {"cache_theta": 0.5, "cache_lambda": 0.1, "perplexity": 39.0,
            "perplexity_paper_convention": 29.0,
            "grid": [{"theta": 0.5, "lambda": 0.1, "perplexity": 40.0,
                      "perplexity_paper_convention": 30.0}]}
  grids = {"cache": {"theta": [0.5], "lambda": [0.1]},
           "dynamic_sgd": {"learning_rate": [1e6], "decay": [0.0]},
           "dynamic_rms": {"learning_rate": [1e6], "decay": [0.0]}}
  row = {"name": "single", "status": "finished", "valid_perplexity": 50.0,
         "test_perplexity": 48.0, "results": {"grids": grids, "cache": cached,
                                              "dynamic_sgd": diverged, "dynamic_rms": diverged}}
  text = testtime.format_markdown({"table": "demo", "title": "t", "command": "c", "date": "d",
                                   "cache_size": 100, "rows": [row]})
  assert ("| single | 50.0 / 48.0 | 40.0 / 39.0 | diverged / diverged | diverged / diverged |"
          in text)
  assert "| single | 0.5, 0.1 | none: every point diverged | none: every point diverged |" in text


@pytest.mark.parametrize("method", ("sgd", "rms"))
def test_dynamic_evaluation_leaves_inert_parameters_as_trained(method):
  model = tiny_model(model__score="conv1x1")
  evaluator = dynamic_eval.DynamicEvaluator(model)
  params = jax.tree.map(jnp.asarray, model.params)
  adapted, _, _ = evaluator._adapt(params, models.trainable(params), evaluator.rule(method),
                                   evaluator.windows("valid")[0].batch, None,
                                   np.float32(0.1), np.float32(0.0))
  assert adapted["score"]["slot_b"] == params["score"]["slot_b"]      # inert: b
  assert np.any(adapted["score"]["slot_w"] != params["score"]["slot_w"])


def test_a_dynamic_search_that_diverges_everywhere_steps_its_learning_rate_down(
    model, monkeypatch):
  monkeypatch.setattr(dynamic_eval, "GRIDS", {"sgd": {"learning_rate": (1e6, 3e6),
                                                      "decay": (0.0, 0.1)}})
  result = dynamic_eval.evaluate_split(model, "test", "sgd", window=50, extensions=2)
  # 1e6 * 1e6 / 3e6 -> 3.3e5, then 3.3e5 ** 2 / 1e6 -> 1.1e5, each at both decays.
  assert [(p["learning_rate"], p["decay"]) for p in result["grid"]] == [
      (1e6, 0.0), (1e6, 0.1), (3e6, 0.0), (3e6, 0.1), (3.3e5, 0.0), (3.3e5, 0.1),
      (1.1e5, 0.0), (1.1e5, 0.1)]
  assert result["perplexity"] == math.inf


def test_cli_evaluate_with_a_cache_and_with_dynamic_evaluation(table_dir):
  workdir = table_dir / "none"
  result = _main("--mode=evaluate", f"--workdir={workdir}", "--split=test", "--cache=100",
                 "--cache_theta=0.3", "--cache_lambda=0.1")
  assert result.returncode == 0, result.stderr[-2000:]
  cached = json.loads(result.stdout.splitlines()[-1])
  assert (cached["method"], cached["cache_theta"], cached["cache_lambda"]) == ("cache", 0.3,
                                                                              0.1)
  assert {"perplexity", "perplexity_paper_convention", "model_perplexity",
          "model_perplexity_paper_convention"} <= cached.keys()
  result = _main("--mode=evaluate", f"--workdir={workdir}", "--split=test", "--cache=100",
                 "--cache_theta=0.3", "--cache_lambda=0.1", "--cache_states=head")
  assert result.returncode == 0, result.stderr[-2000:]
  over_head = json.loads(result.stdout.splitlines()[-1])      # `none`: h'_t = h_t
  assert (over_head["cache_states"], cached["cache_states"]) == ("head", "lstm")
  assert over_head["perplexity"] == cached["perplexity"]
  result = _main("--mode=evaluate", f"--workdir={workdir}", "--split=test", "--dynamic=sgd",
                 "--dynamic_lr=0.1", "--dynamic_decay=0", "--dynamic_window=100")
  assert result.returncode == 0, result.stderr[-2000:]
  dynamic = json.loads(result.stdout.splitlines()[-1])
  assert dynamic["method"] == "dynamic_sgd" and dynamic["learning_rate"] == 0.1
  assert dynamic["model_perplexity"] == pytest.approx(cached["model_perplexity"], rel=1e-5)
  # The command line prints what the libraries compute with the same settings.
  model = evaluate.load(workdir)
  library_cache = cache.evaluate_split(model, "test", 100, theta=0.3, lam=0.1)
  library_dynamic = dynamic_eval.evaluate_split(model, "test", "sgd", learning_rate=0.1,
                                                decay=0.0, window=100)
  for printed, computed in ((cached, library_cache), (dynamic, library_dynamic)):
    for key in ("perplexity", "perplexity_paper_convention", "model_perplexity"):
      assert printed[key] == pytest.approx(computed[key], rel=1e-6), key
  assert cached["perplexity"] != cached["model_perplexity"]
  assert dynamic["perplexity"] != dynamic["model_perplexity"]


def test_cli_refuses_the_cache_with_dynamic_evaluation(table_dir):
  result = _main("--mode=evaluate", f"--workdir={table_dir / 'none'}", "--cache=10",
                 "--dynamic=sgd")
  assert result.returncode == 1
  assert result.stderr.strip().splitlines() == [
      "error: --cache and --dynamic are two methods: give one of them"]


@pytest.mark.parametrize("table", sorted(
    p.parent.name for p in tiny_config.COMMITTED_RESULTS.glob(f"*/{testtime.PAGE_JSON}")))
def test_committed_testtime_pages_are_what_the_command_writes_from_the_committed_files(
    table, tmp_path, monkeypatch):
  """docs/results/<table>/testtime.md: rewritten from the rows' logs and their saved
  testtime.json alone (no checkpoint), the command gives the committed rows and tables; and
  each saved result was computed on the row's own trained model (its cache without weight,
  lambda = 0, gives the row's valid perplexity, and the model alone its test perplexity)."""
  committed = tiny_config.COMMITTED_RESULTS / table
  rewritten = tmp_path / "runs" / table
  shutil.copytree(committed, rewritten)
  monkeypatch.chdir(tmp_path)
  monkeypatch.setattr(testtime, "row_results", tiny_config.must_not_run)
  page = json.loads((committed / testtime.PAGE_JSON).read_text())
  rows = re.search(r"--rows=(\S+)", page["command"])
  testtime.run(table, rewritten, rows=rows.group(1) if rows else (),
               cache_size=page["cache_size"], dynamic_window=page["dynamic_window"],
               grid_extensions=page["grid_extensions"])
  again = json.loads((rewritten / testtime.PAGE_JSON).read_text())
  assert again["command"] == page["command"]
  assert again["rows"] == page["rows"]
  table_lines = lambda d: [l for l in (d / testtime.PAGE_MD).read_text().splitlines()
                           if l.startswith("|")]
  assert table_lines(rewritten) == table_lines(committed)
  evaluated = [r for r in page["rows"] if r["results"] is not None]
  assert evaluated
  for row in evaluated:
    cached = row["results"]["cache"]
    assert cached["model_perplexity"] == pytest.approx(row["test_perplexity"], rel=1e-4)
    no_cache = [p["perplexity"] for p in cached["grid"] if p["lambda"] == 0.0]
    assert no_cache and no_cache[0] == pytest.approx(row["valid_perplexity"], rel=1e-4)
