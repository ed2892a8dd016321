"""Dynamic evaluation (Krause, Kahembwe, Murray & Renals 2018) of any trained model.

A split is read in order, in windows s_1, s_2, ...; each window is scored with the current
parameters, then one gradient step on its loss L(s_i) (the mean NLL of its tokens) adapts
them. The two update rules (theta_0: the trained parameters):

- "sgd" (sec. 4): theta <- theta - eta grad L(s_i) + lambda (theta_0 - theta);
- "rms" (sec. 5, the RMS-normalised rule): with MS_g the mean squared gradient of each
  parameter over the batches of the training split (`gradient_rms`),
      theta <- theta - eta grad L(s_i) / (sqrt(MS_g) + epsilon)
               + min(lambda RMS_norm, 1) (theta_0 - theta),
  RMS_norm = sqrt(MS_g) / mean(sqrt(MS_g)), the mean over the parameter arrays of each
  array's mean (as in the authors' code).

Both rules are one function, `update`. The windows, the clipping at 1, the grid search and
divergence: docs/testtime.md, "Dynamic evaluation".
"""

import dataclasses
import functools
import math
from typing import Iterator, MutableMapping, NamedTuple, Optional, Sequence

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from attnlm_jax.common.errors import UserError
from attnlm_jax.common import logging_utils
from attnlm_jax import data as data_lib
from attnlm_jax.data import batching
from attnlm_jax.data import pipeline
from attnlm_jax.data import vocab as vocab_lib
from attnlm_jax.evaluation import evaluate
from attnlm_jax import models
from attnlm_jax.models import losses
from attnlm_jax.models import scores
from attnlm_jax.testtime import grid_search
from attnlm_jax.training import parallel
from attnlm_jax.training import steps

METHODS = ("sgd", "rms")
# The (learning rate, decay) grids searched on the validation split.
GRIDS = {"sgd": {"learning_rate": (0.1, 0.3, 1.0), "decay": (0.0, 0.01, 0.1)},
         "rms": {"learning_rate": (1e-4, 3e-4, 1e-3), "decay": (0.01, 0.03, 0.1)}}
EPSILON = 2e-5        # Krause et al.'s epsilon of the RMS rule.
# Training batches that give MS_g: None, every one (Krause et al.'s code, --max_batches -1);
# a number caps them at that many, evenly spaced. A cap of 200 left the embedding rows of the
# words no sampled batch held with MS_g near 0, and the rule diverged on them (docs/testtime.md).
STAT_BATCHES = None
# A pass whose mean NLL (nats per token) is above this has diverged: its perplexity
# overflows a float.
DIVERGED_MEAN_NLL = 700.0
# A pass is looked at every this many windows, and ends there once it is sure to diverge.
DIVERGENCE_CHECK_EVERY = 16
# Each window is padded in time to a multiple of this, not evaluation's
# steps.EVAL_TIME_MULTIPLE (16): a pass is thousands of sequential steps, each computing its
# window's padding, while a width more costs one compile of seconds (benchmarks/dynamic_eval.py).
WINDOW_TIME_MULTIPLE = 4
# What a window counts (plural, as results name it) -> the singular, for a window of 1.
WINDOW_UNITS = {"sentences": "sentence", "document spans": "document span", "tokens": "token"}


class DynamicEvalError(UserError):
  """An unknown update rule, or a learning rate, decay or window that cannot be used."""


class Rule(NamedTuple):
  """The per-parameter arrays of an update rule (pytrees like the trainable parameters):
  the gradient's divisor sqrt(MS_g) + epsilon and the decay's scale RMS_norm (1 for SGD)."""
  denominator: dict
  decay_scale: dict


@dataclasses.dataclass(frozen=True)
class Window:
  """A window of the split: its batch (`batching.make_batch` layout) and the stream offset of
  each row's first target."""
  batch: dict
  starts: np.ndarray


def update(weight, grad, anchor, denominator, decay_scale, learning_rate, decay):
  """One parameter's dynamic-evaluation step (Krause et al. 2018, secs. 4-5):
  theta - eta grad / denominator + min(lambda decay_scale, 1) (theta_0 - theta)."""
  return (weight - learning_rate * grad / denominator
          + jnp.minimum(decay * decay_scale, 1.0) * (anchor - weight))


def _window_log_probs(params, batch, carry, model_config):
  """`evaluate.log_prob_step` without hidden states: (log-probs [rows, T], carry after)."""
  log_probs, _, carry = evaluate.log_prob_step(params, batch, carry, model_config=model_config)
  return log_probs, carry


def _gradient(params, batch, carry, model_config):
  """(gradient of the mean NLL of the batch's tokens, (log-probs, carry after the batch)).

  The gradient of a score's inert parameters (`scores.Score.inert`: those training cannot
  move) is held at 0, so no update rule moves them."""
  def loss_fn(weights):
    log_probs, new_carry = _window_log_probs({**params, **weights}, batch, carry,
                                             model_config)
    return -log_probs.sum() / jnp.maximum(batch["lengths"].sum(), 1), (log_probs, new_carry)
  grads, aux = jax.grad(loss_fn, has_aux=True)(models.trainable(params))
  inert = scores.get(model_config.score).inert
  if inert:
    grads["score"] = {name: jnp.zeros_like(grad) if name in inert else grad
                      for name, grad in grads["score"].items()}
  return grads, aux


def _adapt(params, anchor, rule, batch, carry, learning_rate, decay, *, model_config):
  """Scores a window, then takes one step on it: (new parameters, log-probs, carry)."""
  grads, (log_probs, carry) = _gradient(params, batch, carry, model_config)
  step = functools.partial(update, learning_rate=learning_rate, decay=decay)
  weights = jax.tree.map(step, models.trainable(params), grads, anchor, rule.denominator,
                         rule.decay_scale)
  return {**params, **weights}, log_probs, carry


def unit_windows(stream: pipeline.EncodedSplit, units: tuple[np.ndarray, np.ndarray],
                 size: int, time_multiple: int = WINDOW_TIME_MULTIPLE) -> Iterator[Window]:
  """Windows of `size` consecutive units (rows of evaluation) in stream order; the last one
  filled up with empty rows, each padded in time to a multiple of `time_multiple`."""
  starts, lengths = units
  for first in range(0, len(starts), size):
    fill = size - len(starts[first:first + size])
    window_starts = np.pad(starts[first:first + size], (0, fill))
    window_lengths = np.pad(lengths[first:first + size], (0, fill))
    width = int(batching.bucket_width(window_lengths.max(), time_multiple))
    yield Window(pipeline.split_batch(stream, window_starts, window_lengths, width),
                 window_starts)


def split_windows(model: evaluate.TrainedModel, data: data_lib.LMData, split: str,
                  window: int, time_multiple: int = WINDOW_TIME_MULTIPLE) -> list[Window]:
  """The windows of a split: `unit_windows` of `window` units (padded in time to a multiple
  of `time_multiple`), or under the stream protocol the split as one stream in windows of
  max_len tokens."""
  if not data.is_stream:
    return list(unit_windows(data.split(split), data.units(split), window, time_multiple))
  width = model.config.data.max_len
  return [Window(batch, np.array([index * width]))
          for index, batch in enumerate(data.eval_batches(split, 1))]


class DynamicEvaluator:
  """Dynamic evaluation of one trained model, its steps compiled once for every pass."""

  def __init__(self, model: evaluate.TrainedModel, window: int = 1,
               time_multiple: int = WINDOW_TIME_MULTIPLE):
    """Loads the model's corpus; the steps compile on first use, once per window width.

    Args:
      model: a trained model.
      window: units (sentences or document spans) per window; unused under the stream
        protocol (windows of max_len tokens).
      time_multiple: each window is padded in time to a multiple of this (unused under the
        stream protocol).
    """
    if window < 1:
      raise DynamicEvalError(f"--dynamic_window={window} must be at least 1 (rows of "
                             "evaluation per window)")
    self.model, self.window, self.time_multiple = model, window, time_multiple
    model.check_every_token("dynamic evaluation")
    self.data = model.data
    config = model.config.model
    self._score = jax.jit(functools.partial(_window_log_probs, model_config=config))
    self._gradient = jax.jit(functools.partial(_gradient, model_config=config))
    self._adapt = jax.jit(functools.partial(_adapt, model_config=config))
    self._windows = {}

  def windows(self, split: str) -> list[Window]:
    """The split's windows (made once)."""
    if split not in self._windows:
      self._windows[split] = split_windows(self.model, self.data, split, self.window,
                                           self.time_multiple)
    return self._windows[split]

  def _initial_carry(self, batch_size: int):
    """The state of `batch_size` streams before their first window (None outside the
    stream protocol)."""
    return (steps.initial_carry(self.model.params, self.model.config.model, batch_size)
            if self.data.is_stream else None)

  def log_probs(self, windows: Sequence[Window], num_tokens: int, rule: Optional[Rule] = None,
                learning_rate: float = 0.0, decay: float = 0.0) -> np.ndarray:
    """log p [num_tokens] (float64) of the tokens of a stream read in `windows`, in stream
    order: each window scored, then (with a `rule`) one step on it; without a rule the
    trained parameters throughout (the static model over the same windows).

    A pass sure to diverge (checked every DIVERGENCE_CHECK_EVERY windows: a log-probability
    not finite, or an NLL so far above DIVERGED_MEAN_NLL nats per token of the whole stream)
    ends early, its later tokens NaN (docs/testtime.md, "Dynamic evaluation")."""
    params = jax.tree.map(jnp.asarray, self.model.params)
    anchor = models.trainable(params)
    carry = self._initial_carry(1)
    uniform_nll = np.log(self.model.config.model.vocab_size)
    scored, checked, nll, broke_by = [], 0, 0.0, None
    description = ("static" if rule is None else
                   f"dynamic evaluation, lr {learning_rate:g}, decay {decay:g}")
    with logging_utils.progress_bar(description, total=len(windows), unit=" windows") as bar:
      for index, window in enumerate(windows, 1):
        if rule is None:
          log_probs, carry = self._score(params, window.batch, carry)
        else:
          params, log_probs, carry = self._adapt(params, anchor, rule, window.batch, carry,
                                                 np.float32(learning_rate),
                                                 np.float32(decay))
        scored.append((window, log_probs))
        bar.update()
        if index % DIVERGENCE_CHECK_EVERY == 0 and index < len(windows):
          group = [(w, np.asarray(found)) for w, found in scored[checked:]]
          group_nll = -sum(float(found.sum()) for _, found in group)
          group_tokens = sum(int(w.batch["lengths"].sum()) for w, _ in group)
          if broke_by is None and not group_nll <= uniform_nll * group_tokens:
            broke_by = index
          nll += group_nll
          checked = len(scored)
          if not nll <= DIVERGED_MEAN_NLL * num_tokens:  # NaN included
            logging.info("%s diverged by window %d of %d (scoring worse than a uniform guess "
                         "over the vocabulary by window %d): the pass ends there",
                         description, index, len(windows), broke_by)
            break
    result = np.full(num_tokens, np.nan)
    for window, log_probs in scored:
      log_probs = np.asarray(log_probs)
      for row, (start, length) in enumerate(zip(window.starts, window.batch["lengths"])):
        result[start:start + length] = log_probs[row, :length]
    return result

  def split_log_probs(self, split: str, rule: Optional[Rule] = None,
                      learning_rate: float = 0.0, decay: float = 0.0) -> np.ndarray:
    """`log_probs` of every token of `split` read in its windows (`split_windows`)."""
    return self.log_probs(self.windows(split), len(self.data.split(split).tokens), rule,
                          learning_rate, decay)

  def stat_batches(self) -> list[int]:
    """The indices of the training batches that give MS_g (`gradient_rms`): every one, or
    STAT_BATCHES of them evenly spaced (under the stream protocol the first ones)."""
    batch_size = self.model.config.data.eval_batch_size
    if self.data.is_stream:
      total = self.data.num_windows("train", batch_size)
    else:
      total = -(-len(self.data.units("train")[0]) // batch_size)
    count = total if STAT_BATCHES is None else min(STAT_BATCHES, total)
    if self.data.is_stream:
      return list(range(count))
    return sorted(set(np.linspace(0, total - 1, count).round().astype(int)))

  def gradient_rms(self) -> dict:
    """sqrt(MS_g) per parameter (Krause et al. 2018, sec. 5): MS_g = (1/B) sum_b g_b^2, g_b
    the gradient of the mean NLL of training batch b, over the B evaluation batches of the
    training split that `stat_batches` names (`eval_batch_size` rows each; under the stream
    protocol the windows of `eval_batch_size` streams, in order)."""
    batch_size = self.model.config.data.eval_batch_size
    chosen = set(self.stat_batches())
    carry = self._initial_carry(batch_size)
    squares = jax.tree.map(jnp.zeros_like, models.trainable(self.model.params))
    with logging_utils.progress_bar("MS_g", total=len(chosen), unit=" batches") as bar:
      for index, batch in enumerate(self.data.eval_batches("train", batch_size)):
        if index in chosen:
          if carry is None:
            batch = parallel.pad_time(batch, steps.EVAL_TIME_MULTIPLE)
          grads, (_, carry) = self._gradient(self.model.params, batch, carry)
          squares = jax.tree.map(lambda s, g: s + g * g, squares, grads)
          bar.update()
    return jax.tree.map(lambda s: np.sqrt(np.asarray(s) / len(chosen)), squares)

  def rule(self, method: str) -> Rule:
    """The update rule of `method` ("sgd" or "rms")."""
    weights = models.trainable(self.model.params)
    if method == "sgd":
      ones = jax.tree.map(lambda w: np.float32(1.0), weights)
      return Rule(ones, ones)
    rms = self.gradient_rms()
    mean = np.mean([np.mean(leaf) for leaf in jax.tree.leaves(rms)])
    return Rule(jax.tree.map(lambda r: (r + EPSILON).astype(np.float32), rms),
                jax.tree.map(lambda r: (r / mean).astype(np.float32), rms))


def perplexities(tokens: np.ndarray, log_probs: np.ndarray,
                 released_count: int | None = None) -> dict:
  """`losses.stream_perplexities`, both infinite for a pass that diverged (a log-prob that is not
  finite, or too low for a float)."""
  if np.all(np.isfinite(log_probs)) and -log_probs.mean() < DIVERGED_MEAN_NLL:
    return losses.stream_perplexities(tokens, log_probs, released_count)
  return {"perplexity": float("inf"), "perplexity_paper_convention": float("inf")}


def check(method: str, learning_rate: Optional[float], decay: Optional[float]) -> None:
  """Raises DynamicEvalError for an unknown method or a rate that is negative or not finite
  (None: searched)."""
  if method not in METHODS:
    raise DynamicEvalError(f"--dynamic={method} is unknown: use one of {', '.join(METHODS)}")
  for flag, value in (("dynamic_lr", learning_rate), ("dynamic_decay", decay)):
    if value is not None and not 0 <= value < math.inf:
      raise DynamicEvalError(f"--{flag}={value} must be a number >= 0 (or omitted to search "
                             f"it on {evaluate.FIT_SPLIT})")


def pass_key(split: str, method: Optional[str] = None, learning_rate: float = 0.0,
             decay: float = 0.0) -> str:
  """The name of a pass over a split in `evaluate_split`'s `passes`: "test static" (the
  trained parameters), "valid dynamic_sgd lr 0.3 decay 0.01"."""
  if method is None:
    return f"{split} static"
  return f"{split} dynamic_{method} lr {learning_rate!r} decay {decay!r}"


def evaluate_split(model: evaluate.TrainedModel, split: str, method: str,
                   learning_rate: Optional[float] = None, decay: Optional[float] = None,
                   window: int = 1, extensions: int = grid_search.EXTENSIONS,
                   passes: Optional[MutableMapping[str, dict]] = None) -> dict:
  """Both perplexities of a split with and without dynamic evaluation.

  Args:
    model: a trained model (`evaluate.load`).
    split: the split to evaluate.
    method: "sgd" or "rms".
    learning_rate, decay: eta and lambda; the ones left None are chosen on the validation
      split by the grid search (`GRIDS[method]`, or the axis of the one not given), by the
      lowest perplexity (every token predicted).
    window: units (sentences or document spans) per window; unused under the stream
      protocol (windows of max_len tokens).
    extensions: steps the search may take past each edge of its grid (`grid_search`).
    passes: the perplexities of passes made before ({`pass_key`: {"perplexity",
      "perplexity_paper_convention"}}), not made again; each new pass is added to it. A
      mapping that saves itself (`testtime`) lets an interrupted evaluation go on from its
      last pass.

  Returns:
    {"split", "step", "method": "dynamic_sgd" or "dynamic_rms", "learning_rate", "decay",
     "window", "window_unit" (a key of WINDOW_UNITS), "fitted_on"
     (the split searched, None when both were given), "grid"
     ([{"learning_rate", "decay", "perplexity", "perplexity_paper_convention"}] on it),
     "perplexity", "perplexity_paper_convention" (dynamic), "model_perplexity",
     "model_perplexity_paper_convention" (the trained parameters over the same windows),
     "tokens", "sentences", and for "rms" "gradient_batches": the training batches MS_g
     averages over}.
  """
  check(method, learning_rate, decay)
  evaluator = DynamicEvaluator(model, window)
  rule = functools.cache(lambda: evaluator.rule(method))  # Made once, when first needed.
  passes = {} if passes is None else passes

  def run_pass(split_name, dynamic=True, rate=0.0, decay_rate=0.0):
    """The perplexities of one pass over a split (with dynamic evaluation, or the trained
    parameters throughout): made, or found in `passes`."""
    key = pass_key(split_name, method if dynamic else None, rate, decay_rate)
    if key not in passes:
      log_probs = evaluator.split_log_probs(split_name, rule() if dynamic else None, rate,
                                            decay_rate)
      passes[key] = perplexities(evaluator.data.split(split_name).tokens, log_probs,
                                 evaluator.data.released_count(split_name))
      logging.info("%s: perplexity %.2f", key, passes[key]["perplexity"])
    return passes[key]

  grid, fitted_on = [], None
  if learning_rate is None or decay is None:
    fitted_on = evaluate.FIT_SPLIT
    rates = GRIDS[method]["learning_rate"] if learning_rate is None else (learning_rate,)
    decays = GRIDS[method]["decay"] if decay is None else (decay,)
    grid = grid_search.search(
        lambda point: run_pass(evaluate.FIT_SPLIT, True, point["learning_rate"],
                               point["decay"]),
        {"learning_rate": rates, "decay": decays}, extensions, retreat=("learning_rate", -1))
    best = min(grid, key=lambda point: point["perplexity"])
    learning_rate, decay = best["learning_rate"], best["decay"]
  tokens = evaluator.data.split(split).tokens
  dynamic = run_pass(split, True, float(learning_rate), float(decay))
  static = run_pass(split, False)
  if evaluator.data.is_stream:
    window, unit = model.config.data.max_len, "tokens"
  else:
    unit = "document spans" if model.config.data.span == "document" else "sentences"
  return {
      "split": split, "step": model.step, "method": f"dynamic_{method}",
      "learning_rate": float(learning_rate), "decay": float(decay), "window": window,
      "window_unit": unit, "fitted_on": fitted_on, "grid": grid, **dynamic,
      **{f"model_{key}": value for key, value in static.items()},
      "tokens": int(len(tokens)), "sentences": int(np.sum(tokens == vocab_lib.EOS_ID)),
      **({"gradient_batches": len(evaluator.stat_batches())} if method == "rms" else {}),
  }
