"""Interpolated language models: several trained runs mixed token by token.

    p(w_t | w_<t) = sum_k lambda_k p_k(w_t | w_<t),   lambda_k >= 0,  sum_k lambda_k = 1

The weights are given, or fitted on the validation split by EM (Jelinek & Mercer 1980;
Dempster, Laird & Rubin 1977), each iteration setting

    r_kt = lambda_k p_k(t) / sum_j lambda_j p_j(t),    lambda_k <- (1/N) sum_t r_kt,

which never lowers the validation log-likelihood (docs/training.md, "The DAS-paper rows").
"""

from typing import Optional, Sequence

from etils import epath
import numpy as np

from attnlm_jax.common.errors import UserError
from attnlm_jax.data import vocab as vocab_lib
from attnlm_jax.evaluation import evaluate
from attnlm_jax.models import losses


class EnsembleError(UserError):
  """Members or weights that cannot be mixed; the message names them and the fix."""


def mixture_log_probs(log_probs: np.ndarray, weights: np.ndarray) -> np.ndarray:
  """log sum_k lambda_k p_k(t) [N] from member log-probs [K, N] and weights [K]."""
  with np.errstate(divide="ignore"):
    log_weights = np.log(np.asarray(weights, np.float64))
  return np.logaddexp.reduce(log_weights[:, None] + log_probs, axis=0)


def fit_weights(log_probs: np.ndarray, max_iterations: int = 500,
                tolerance: float = 1e-10) -> np.ndarray:
  """EM weights [K] maximising sum_t log sum_k lambda_k p_k(t) for log-probs [K, N].

  Starts from equal weights; stops when the mean log-likelihood gains less than
  `tolerance` per token, or after `max_iterations`.
  """
  num_models = log_probs.shape[0]
  weights = np.full(num_models, 1.0 / num_models)
  previous = -np.inf
  for _ in range(max_iterations):
    mixture = mixture_log_probs(log_probs, weights)
    current = float(mixture.mean())
    if current - previous < tolerance:
      break
    previous = current
    with np.errstate(divide="ignore"):
      responsibilities = np.exp(np.log(weights)[:, None] + log_probs - mixture[None, :])
    weights = responsibilities.mean(axis=1)
    weights /= weights.sum()
  return weights


def check_weights(weights: Sequence, num_models: int) -> np.ndarray:
  """The given weights (numbers or their text) as an array; EnsembleError unless they are
  `num_models` non-negative numbers summing to 1."""
  message = (f"--weights={','.join(map(str, weights))} must be {num_models} non-negative "
             "numbers summing to 1 (one per workdir), or omitted to fit them on the "
             "validation split")
  try:
    values = np.asarray([float(w) for w in weights], np.float64)
  except ValueError as e:
    raise EnsembleError(message) from e
  if (len(values) != num_models or not np.all(np.isfinite(values)) or np.any(values < 0)
      or abs(values.sum() - 1) > 1e-6):
    raise EnsembleError(message)
  return values


def interpolate(workdirs: Sequence, split: str, weights: Optional[Sequence] = None) -> dict:
  """Perplexities of each member and of their mixture on `split`.

  Args:
    workdirs: two or more training workdirs (each restored with its own config.json).
    split: the split to score.
    weights: lambda_k (numbers or their text), one per workdir; None fits them on the
      validation split by EM.

  Returns:
    {"split", "members": [{"workdir", "step", "perplexity",
     "perplexity_paper_convention"}], "weights", "weights_fitted_on" (the split, or None
     when given), "perplexity", "perplexity_paper_convention", "tokens", "sentences"}.

  Raises:
    EnsembleError: fewer than two workdirs, bad weights, or members whose vocabularies
      (or token streams) differ.
  """
  if len(workdirs) < 2:
    raise EnsembleError(f"--workdirs={','.join(map(str, workdirs))} names fewer than two "
                        "runs: list two or more training workdirs to interpolate")
  if weights is not None:
    weights = check_weights(weights, len(workdirs))
  members = [evaluate.load(workdir) for workdir in workdirs]
  for workdir, member in zip(workdirs[1:], members[1:]):
    if member.vocab.words != members[0].vocab.words:
      raise EnsembleError(f"the vocabulary of {workdir} differs from that of {workdirs[0]}: "
                          "interpolate only runs trained on the same corpus and vocabulary")

  def scored(split_name):
    streams = [evaluate.split_log_probs(member, split_name) for member in members]
    for workdir, (tokens, _) in zip(workdirs[1:], streams[1:]):
      if not np.array_equal(tokens, streams[0][0]):
        raise EnsembleError(f"the {split_name} split of {workdir} differs from that of "
                            f"{workdirs[0]}: interpolate only runs of the same corpus")
    return streams[0][0], np.stack([log_probs for _, log_probs in streams])

  tokens, log_probs = scored(split)
  fitted_on = None
  if weights is None:
    fitted_on = evaluate.FIT_SPLIT
    weights = fit_weights(log_probs if split == evaluate.FIT_SPLIT
                          else scored(evaluate.FIT_SPLIT)[1])
  released_count = members[0].released_count(split)
  return {
      "split": split,
      "members": [{"workdir": str(epath.Path(workdir)), "step": member.step,
                   **losses.stream_perplexities(tokens, member_log_probs, released_count)}
                  for workdir, member, member_log_probs in zip(workdirs, members, log_probs)],
      "weights": [float(w) for w in weights],
      "weights_fitted_on": fitted_on,
      **losses.stream_perplexities(tokens, mixture_log_probs(log_probs, weights),
                                   released_count),
      "tokens": int(len(tokens)),
      "sentences": int(np.sum(tokens == vocab_lib.EOS_ID)),
  }
