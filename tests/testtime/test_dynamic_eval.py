"""Dynamic evaluation (Krause et al. 2018): the SGD and RMS rules by hand, causality, the
stream protocol, divergence, the grid search and bad settings."""

import logging
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlm_jax import data as data_lib
from attnlm_jax.data import pipeline
from attnlm_jax.evaluation import evaluate
from attnlm_jax.experiments import testtime_page
from attnlm_jax import models
from attnlm_jax.testtime import dynamic_eval
import tiny_config


def test_update_rule_by_hand():
  step = lambda decay: float(dynamic_eval.update(1.0, 2.0, 0.5, 4.0, 3.0, 0.1, decay))
  assert step(0.1) == pytest.approx(1.0 - 0.1 * 2.0 / 4.0 + 0.3 * (0.5 - 1.0))
  assert step(0.5) == pytest.approx(1.0 - 0.1 * 2.0 / 4.0 + 1.0 * (0.5 - 1.0))  # clipped at 1


def _hand_dynamic_log_probs(model, sentences, runs):
  """Dynamic evaluation of `sentences` (each its own window, from the zero state) worked by
  hand from docs/testtime.md: score window i with theta, then theta <- theta - eta grad L /
  (sqrt(MS_g) + epsilon) + min(lambda RMS_norm, 1) (theta_0 - theta), L the mean NLL of the
  window's tokens, theta_0 the trained parameters, RMS_norm = sqrt(MS_g) / (the mean over the
  arrays of each array's mean). runs: (eta, lambda, sqrt(MS_g) or None for SGD, whose
  sqrt(MS_g) + epsilon = RMS_norm = 1) each. Returns each run's log-probs of each window."""
  config = model.config.model
  anchor = models.trainable(model.params)
  width = max(map(len, sentences))          # one padded width: one compile for every window

  def log_probs_of(theta, inputs, targets, length):
    logits = models.apply({**model.params, **theta}, config, inputs[None], length[None])
    picked = jax.nn.log_softmax(logits[0])[jnp.arange(width), targets]
    return jnp.where(jnp.arange(width) < length, picked, 0.0)

  score_and_grad = jax.jit(lambda theta, *window: (
      log_probs_of(theta, *window),
      jax.grad(lambda t: -jnp.sum(log_probs_of(t, *window)) / window[2])(theta)))
  windows = [(np.pad(np.concatenate([[data_lib.EOS_ID], s[:-1]]), (0, width - len(s))),
              np.pad(s, (0, width - len(s))), np.int32(len(s))) for s in sentences]
  found = []
  for learning_rate, decay, sqrt_ms in runs:
    if sqrt_ms is None:
      denominator = scale = jax.tree.map(lambda w: 1.0, anchor)
    else:
      mean = np.mean([float(np.mean(r)) for r in jax.tree.leaves(sqrt_ms)])
      denominator = jax.tree.map(lambda r: r + 2e-5, sqrt_ms)
      scale = jax.tree.map(lambda r: r / mean, sqrt_ms)
    theta, scored = anchor, []
    for window in windows:
      log_probs, grads = score_and_grad(theta, *map(jnp.asarray, window))
      scored.append(np.asarray(log_probs)[:window[2]])
      theta = jax.tree.map(
          lambda w, g, w0, d, r: w - learning_rate * g / d + np.minimum(decay * r, 1.0) * (w0 - w),
          theta, grads, anchor, denominator, scale)
    found.append(scored)
  return found


@pytest.mark.parametrize("method, learning_rate, decay", [("sgd", 0.5, 0.1),
                                                           ("rms", 1e-2, 0.5)])
def test_three_windows_of_dynamic_evaluation_by_hand(model, monkeypatch, method,
                                                     learning_rate, decay):
  """Three one-sentence windows scored and adapted by `log_probs` give the log-probs of the
  rule worked by hand (`_hand_dynamic_log_probs`): the third window is scored after two steps,
  the second of which decays towards the trained parameters. For `rms`, sqrt(MS_g) is set to
  arrays of wide spread (some decay rates clipped at 1); its own computation is tested below."""
  evaluator = dynamic_eval.DynamicEvaluator(model, window=1)
  sqrt_ms = None
  if method == "rms":
    draw = np.random.default_rng(0)
    sqrt_ms = jax.tree.map(lambda w: np.exp(draw.normal(-2.0, 1.5, np.shape(w))).astype(
        np.float32), models.trainable(model.params))
    mean = np.mean([np.mean(r) for r in jax.tree.leaves(sqrt_ms)])
    assert any(np.any(decay * r / mean > 1) for r in jax.tree.leaves(sqrt_ms))  # clipped
    monkeypatch.setattr(evaluator, "gradient_rms", lambda: sqrt_ms)
  windows = evaluator.windows("valid")[:3]
  sentences = model.data.sentences("valid")[:3]
  assert [int(w.batch["lengths"][0]) for w in windows] == [len(s) for s in sentences]
  got = evaluator.log_probs(windows, sum(map(len, sentences)), evaluator.rule(method),
                            learning_rate, decay)
  want, static, undecayed = _hand_dynamic_log_probs(
      model, sentences, [(learning_rate, decay, sqrt_ms), (0.0, 0.0, None),
                         (learning_rate, 0.0, sqrt_ms)])
  np.testing.assert_allclose(got, np.concatenate(want), atol=2e-5)
  # The check can fail: the steps moved the third window's log-probs, and so did the decay.
  assert np.abs(want[2] - static[2]).max() > 1e-2
  assert np.abs(want[2] - undecayed[2]).max() > 1e-3


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
  model = tiny_config.untrained_model(model__score="none", data__span="stream", data__bucket=False)
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
  model = tiny_config.untrained_model(model__score=score)
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


def _squared_embedding_gradients(model, batches):
  """The square of the embedding's gradient of each batch's mean NLL, computed directly, each
  batch padded in time to the widest (masked positions change no gradient: one program)."""
  def loss(embed, inputs, lengths, targets):
    logits = models.apply({**model.params, "embed": embed}, model.config.model, inputs, lengths)
    mask = jnp.arange(logits.shape[1])[None] < lengths[:, None]
    log_probs = jax.nn.log_softmax(logits)
    picked = jnp.take_along_axis(log_probs, targets[..., None], -1)[..., 0]
    return -jnp.where(mask, picked, 0).sum() / mask.sum()
  gradient = jax.jit(jax.grad(loss))
  width = max(batch["inputs"].shape[1] for batch in batches)
  pad = lambda x: np.pad(x, ((0, 0), (0, width - x.shape[1])))
  return [gradient(model.params["embed"], pad(batch["inputs"]), batch["lengths"],
                   pad(batch["targets"])) ** 2 for batch in batches]


def _train_batches(model):
  data = data_lib.load(model.config.data, model.vocab)
  return list(data.eval_batches("train", model.config.data.eval_batch_size))


def test_rms_rule_divides_by_the_training_gradients_root_mean_square(model, monkeypatch):
  monkeypatch.setattr(dynamic_eval, "STAT_BATCHES", 2)
  evaluator = dynamic_eval.DynamicEvaluator(model)
  rms = evaluator.gradient_rms()
  batches = _train_batches(model)
  squares = sum(_squared_embedding_gradients(model, [batches[0], batches[-1]]))  # evenly spaced
  np.testing.assert_allclose(rms["embed"], np.sqrt(squares / 2), rtol=1e-4, atol=1e-9)
  rule = evaluator.rule("rms")
  np.testing.assert_allclose(rule.denominator["embed"], rms["embed"] + dynamic_eval.EPSILON)
  means = [np.mean(leaf) for leaf in jax.tree.leaves(rule.decay_scale)]
  assert np.mean(means) == pytest.approx(1.0, rel=1e-5)


def test_rms_statistics_average_over_every_training_batch(model):
  """By default MS_g takes every training batch (Krause et al.'s code); the RMS result reports
  `stat_batches`' count (its page, with STAT_BATCHES=2: test_testtime_page)."""
  batches = _train_batches(model)
  assert len(batches) > 2
  evaluator = dynamic_eval.DynamicEvaluator(model)
  squares = sum(_squared_embedding_gradients(model, batches))
  np.testing.assert_allclose(evaluator.gradient_rms()["embed"],
                             np.sqrt(squares / len(batches)), rtol=1e-4, atol=1e-9)
  assert len(evaluator.stat_batches()) == len(batches)   # what "gradient_batches" reports


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


@pytest.mark.parametrize("value", [math.inf, math.nan])
def test_a_dynamic_rate_that_is_not_finite_is_refused(value):
  """An infinite rate would report an infinite perplexity as a result, not as an error."""
  with pytest.raises(dynamic_eval.DynamicEvalError, match=f"--dynamic_lr={value} must be"):
    dynamic_eval.check("sgd", value, None)
  with pytest.raises(dynamic_eval.DynamicEvalError, match=f"--dynamic_decay={value} must be"):
    dynamic_eval.check("rms", 0.1, value)


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
  text = testtime_page.format_markdown({"table": "demo", "title": "t", "command": "c", "date": "d",
                                   "cache_size": 100, "rows": [row]})
  assert ("| single | 50.0 / 48.0 | 40.0 / 39.0 | diverged / diverged | diverged / diverged |"
          in text)
  assert "| single | 0.5, 0.1 | none: every point diverged | none: every point diverged |" in text


@pytest.mark.parametrize("method", ("sgd", "rms"))
def test_dynamic_evaluation_leaves_inert_parameters_as_trained(method):
  model = tiny_config.untrained_model(model__score="conv1x1")
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
