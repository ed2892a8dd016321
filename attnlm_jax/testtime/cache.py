"""The neural cache (Grave, Joulin & Usunier 2017) over any trained model.

The cache holds the last `size` pairs (h_i, x_{i+1}) of the split read so far: the last LSTM
layer's output h_i (the output layer's h'_i with `states="head"`) and the word that followed
it. At step t (eqs. 2-4 of the paper)

    p_cache(w | h_t) ∝ Σ_{i in the cache, x_{i+1} = w} exp(theta h_t · h_i)
    p(w | h_t) = (1 - lambda) p_model(w | h_t) + lambda p_cache(w | h_t).

The split as one stream, the blocked computation and the grid of theta and lambda:
docs/testtime.md, "The neural cache".
"""

import functools
import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from attnlm_jax.common.errors import UserError
from attnlm_jax.data import vocab as vocab_lib
from attnlm_jax.evaluation import evaluate
from attnlm_jax import models
from attnlm_jax.models import losses
from attnlm_jax.models import nn
from attnlm_jax.testtime import grid_search as grid_search_lib

# The grid searched on the validation split (theta scales h_t · h_i; lambda 0 is the model).
THETAS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)
LAMBDAS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4)
# Queries per block of the cache computation: a block's scores are [BLOCK, size + BLOCK].
BLOCK = 256


class CacheError(UserError):
  """A cache size, theta, lambda or choice of hidden states that cannot be used."""


def split_states(model: evaluate.TrainedModel, split: str, states: str = "lstm"
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(tokens [N], log p_model [N] (float64), h_t [N, H] (float32; h'_t with `states`
  "head", `models.HIDDEN_STATES`)) of every token of a split, computed as evaluation
  computes them and laid out in stream order (`evaluate.split_outputs`)."""
  model.check_every_token("the neural cache")
  return evaluate.split_outputs(model, split, states)


@functools.partial(jax.jit, static_argnames=("size", "block"))
def _cache_log_probs(hidden, words, theta, *, size: int, block: int):
  """`cache_log_probs` on the device: one masked [block, size + block] matmul per block."""
  num_steps = hidden.shape[0]
  num_blocks = -(-num_steps // block)
  tail = num_blocks * block - num_steps
  keys = jnp.pad(hidden, ((size, tail), (0, 0)))           # key j sits at row size + j
  key_words = jnp.pad(words, (size, tail), constant_values=-1)
  lags = jnp.arange(block)[:, None] + size - jnp.arange(size + block)[None, :]   # t - j

  def one_block(first):
    queries = jax.lax.dynamic_slice_in_dim(keys, first + size, block)
    query_words = jax.lax.dynamic_slice_in_dim(key_words, first + size, block)
    block_keys = jax.lax.dynamic_slice_in_dim(keys, first, size + block)
    block_words = jax.lax.dynamic_slice_in_dim(key_words, first, size + block)
    in_cache = (lags >= 1) & (lags <= size) & (first + jnp.arange(size + block) >= size)
    scores = jnp.matmul(queries, block_keys.T, precision=nn.PRECISION)
    logits = jnp.where(in_cache, theta * scores, -jnp.inf)
    log_norm = jax.nn.logsumexp(logits, axis=1)
    same_word = block_words[None, :] == query_words[:, None]
    log_mass = jax.nn.logsumexp(jnp.where(same_word, logits, -jnp.inf), axis=1)
    filled = in_cache.any(axis=1)
    return jnp.where(filled, log_mass - log_norm, -jnp.inf), filled

  log_probs, filled = jax.lax.map(one_block, jnp.arange(num_blocks) * block)
  return log_probs.reshape(-1)[:num_steps], filled.reshape(-1)[:num_steps]


def cache_log_probs(hidden: np.ndarray, words: np.ndarray, size: int, theta: float,
                    block: int = BLOCK) -> tuple[np.ndarray, np.ndarray]:
  """log p_cache(x_{t+1} | h_t) of every step of a stream (Grave et al. 2017, eq. 2).

  Args:
    hidden: h_t [N, H], the query of step t and, once x_{t+1} is known, a key.
    words: x_{t+1} [N], the word step t predicts.
    size: the pairs the cache holds: step t sees steps max(0, t - size) .. t - 1.
    theta: the flatness parameter of eq. 2.
    block: queries per matmul.

  Returns:
    (log p_cache [N] (float64; -inf where the word is not in the cache), filled [N]: whether
    the cache held any pair, i.e. t > 0).
  """
  log_probs, filled = _cache_log_probs(jnp.asarray(hidden, jnp.float32),
                                       jnp.asarray(words, jnp.int32),
                                       jnp.float32(theta), size=size, block=block)
  return np.asarray(log_probs, np.float64), np.asarray(filled)


def mix(model_log_probs: np.ndarray, log_p_cache: np.ndarray, filled: np.ndarray,
        lam: float) -> np.ndarray:
  """log p [N] of p = (1 - lambda) p_model + lambda p_cache (Grave et al. 2017, eq. 4).

  Where the cache is empty (`filled` False: the stream's first step) there is no p_cache
  and lambda's share goes back to the model: p = p_model. lambda = 0 gives p_model exactly.
  """
  with np.errstate(divide="ignore"):
    mixed = np.logaddexp(np.log1p(-lam) + model_log_probs, np.log(lam) + log_p_cache)
  return np.where(filled, mixed, model_log_probs)


def check(size: int, theta: Optional[float], lam: Optional[float],
          states: str = "lstm") -> None:
  """Raises CacheError unless size >= 1, theta >= 0, 0 <= lambda < 1 (None: searched) and
  `states` is one of `models.HIDDEN_STATES`."""
  if states not in models.HIDDEN_STATES:
    raise CacheError(f"--cache_states={states}: choose {' or '.join(models.HIDDEN_STATES)} "
                     "(the last LSTM layer's h_t, or the output layer's h'_t)")
  if size < 1:
    raise CacheError(f"--cache={size}: the cache size must be at least 1 (pairs of a hidden "
                     "state and the next word)")
  if theta is not None and not 0 <= theta < math.inf:
    raise CacheError(f"--cache_theta={theta} must be a number >= 0 (or omitted to search it "
                     f"on {evaluate.FIT_SPLIT})")
  if lam is not None and not 0 <= lam < 1:
    raise CacheError(f"--cache_lambda={lam} must be in [0, 1) (or omitted to search it on "
                     f"{evaluate.FIT_SPLIT})")


def grid_search(tokens: np.ndarray, model_log_probs: np.ndarray, hidden: np.ndarray,
                size: int, thetas=THETAS, lambdas=LAMBDAS,
                extensions: int = grid_search_lib.EXTENSIONS,
                released_count: int | None = None) -> list[dict]:
  """Both perplexities of the cache at every (theta, lambda) of the grid, on one split,
  extended past the edges its best point lies on (`grid_search.search`); `released_count`
  as `losses.stream_perplexities`'s.

  Returns:
    [{"theta", "lambda", "perplexity", "perplexity_paper_convention"}], theta-major, then
    the points past the edges in the order searched.
  """
  cached = {}  # theta -> the cache's log-probs: lambda only mixes them with the model's.

  def score(point):
    theta = point["theta"]
    if theta not in cached:
      cached[theta] = cache_log_probs(hidden, tokens, size, theta)
    log_probs, filled = cached[theta]
    return losses.stream_perplexities(tokens, mix(model_log_probs, log_probs, filled,
                                                  point["lambda"]), released_count)

  return grid_search_lib.search(score, {"theta": thetas, "lambda": lambdas}, extensions)


def evaluate_split(model: evaluate.TrainedModel, split: str, size: int,
                   theta: Optional[float] = None, lam: Optional[float] = None,
                   extensions: int = grid_search_lib.EXTENSIONS,
                   states: str = "lstm") -> dict:
  """Both perplexities of a split with and without a cache of `size` pairs, the model and
  the cache mixed as p = (1 - lambda) p_model + lambda p_cache (Grave et al. 2017, eq. 4).

  Args:
    model: a trained model (`evaluate.load`).
    split: the split to evaluate.
    size: the cache size.
    theta, lam: the cache's parameters; the ones left None are chosen on the validation
      split by the grid search (THETAS x LAMBDAS, or the axis of the one not given), by the
      lowest perplexity (every token predicted).
    extensions: steps the search may take past each edge of its grid (`grid_search`).
    states: the hidden states the cache keeps and queries (`models.HIDDEN_STATES`): "lstm",
      the last LSTM layer's h_t, or "head", the output layer's h'_t, the softmax's input
      (one and the same for the models without an output layer).

  Returns:
    {"split", "step", "method": "cache", "cache_size", "cache_states", "cache_theta",
     "cache_lambda", "fitted_on" (the split searched, None when both were given), "grid"
     (`grid_search` on it), "perplexity", "perplexity_paper_convention" (with the cache),
     "model_perplexity", "model_perplexity_paper_convention" (the model alone), "tokens",
     "sentences"}.
  """
  check(size, theta, lam, states)
  tokens, model_log_probs, hidden = split_states(model, split, states)
  grid, fitted_on = [], None
  if theta is None or lam is None:
    fitted_on = evaluate.FIT_SPLIT
    fit = (tokens, model_log_probs, hidden) if split == evaluate.FIT_SPLIT else split_states(
        model, evaluate.FIT_SPLIT, states)
    grid = grid_search(*fit, size, THETAS if theta is None else (theta,),
                       LAMBDAS if lam is None else (lam,), extensions,
                       model.released_count(evaluate.FIT_SPLIT))
    best = min(grid, key=lambda point: point["perplexity"])
    theta, lam = best["theta"], best["lambda"]
  log_probs, filled = cache_log_probs(hidden, tokens, size, theta)
  released_count = model.released_count(split)
  model_result = losses.stream_perplexities(tokens, model_log_probs, released_count)
  return {
      "split": split, "step": model.step, "method": "cache", "cache_size": size,
      "cache_states": states,
      "cache_theta": float(theta), "cache_lambda": float(lam), "fitted_on": fitted_on,
      "grid": grid, **losses.stream_perplexities(
          tokens, mix(model_log_probs, log_probs, filled, lam), released_count),
      **{f"model_{key}": value for key, value in model_result.items()},
      "tokens": int(len(tokens)), "sentences": int(np.sum(tokens == vocab_lib.EOS_ID)),
  }
