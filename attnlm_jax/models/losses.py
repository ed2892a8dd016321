"""Token losses and perplexities of the language models (docs/training.md, "Evaluating").

- training loss: summed masked token NLL / number of rows (the papers' "normalised by
  mini-batch size");
- `perplexity = exp(sum NLL / predicted tokens)`, the standard perplexity;
- `perplexity_paper_convention = exp(sum of NLL without each sentence's first token /
  every token of the split as the released code counts it)` (`LMData.released_count`): the
  papers' released code's rule. A sentence's first token is the one
  whose input is `<eos>` (the start symbol, or the end of the previous sentence in a row).
"""

import math
from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from attnlm_jax.data.vocab import EOS_ID

# Keys of the sums returned by `nll_sums`; they add up over batches and devices.
SUM_KEYS = ("nll", "nll_after_first", "tokens", "sentences")


def token_mask(lengths: jax.Array, num_steps: int) -> jax.Array:
  """Boolean [B, T]: True where position t < lengths[b] holds a predicted token."""
  return jnp.arange(num_steps)[None, :] < lengths[:, None]


def token_log_probs(logits: jax.Array, targets: jax.Array) -> jax.Array:
  """log p(targets[b, t]) [B, T] in float32 from logits [B, T, V] (natural log)."""
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  return jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]


def nll_sums(logits: jax.Array, inputs: jax.Array, targets: jax.Array,
             lengths: jax.Array) -> dict:
  """Additive statistics of one batch (logits [B, T, V]; inputs, targets [B, T]; lengths [B]).

  Returns:
    nll: sum of -log p over the predicted tokens;
    nll_after_first: the same without each sentence's first token (input `<eos>`), the
      paper convention's numerator;
    tokens: number of predicted tokens (sum of lengths);
    sentences: number of predicted `<eos>` tokens, the sentences the batch ends (one per
      row of the sentence protocol; the whole split's sentences once every token of it is
      predicted, under any protocol).
  """
  mask = token_mask(lengths, targets.shape[1])
  nll = jnp.where(mask, -token_log_probs(logits, targets), 0.0)
  return {
      "nll": nll.sum(),
      "nll_after_first": jnp.where(inputs == EOS_ID, 0.0, nll).sum(),
      "tokens": mask.sum().astype(jnp.float32),
      "sentences": (mask & (targets == EOS_ID)).sum().astype(jnp.float32),
  }


def loss(logits: jax.Array, targets: jax.Array, lengths: jax.Array) -> jax.Array:
  """The training loss: summed masked token NLL / number of rows in the batch."""
  mask = token_mask(lengths, targets.shape[1])
  return jnp.where(mask, -token_log_probs(logits, targets), 0.0).sum() / targets.shape[0]


def perplexities(sums: Mapping[str, float], released_count: float | None = None) -> dict:
  """Both perplexities from summed `nll_sums` statistics (host floats): exp(nll / tokens),
  and the released code's rule, exp(nll_after_first / released_count): a sentence's first
  word is not predicted, and the denominator counts every token of the split as the released
  code splits it into rows (`LMData.released_count`; `tokens` when None)."""
  tokens = float(sums["tokens"])
  denominator = tokens if released_count is None else float(released_count)
  return {
      "perplexity": math.exp(float(sums["nll"]) / tokens),
      "perplexity_paper_convention": math.exp(float(sums["nll_after_first"]) / denominator),
  }


def stream_perplexities(tokens: np.ndarray, log_probs: np.ndarray,
                        released_count: float | None = None) -> dict:
  """Both perplexities (`perplexities`) of a split's token stream [N] from the
  log-probs [N] of its tokens; a sentence's first token is the one after an EOS_ID."""
  first = np.concatenate([[True], tokens[:-1] == EOS_ID])
  return perplexities({"nll": -log_probs.sum(), "nll_after_first": -log_probs[~first].sum(),
                       "tokens": len(tokens)}, released_count)


def unigram_perplexity(train_tokens: np.ndarray, eval_tokens: np.ndarray,
                       vocab_size: int) -> float:
  """Perplexity on `eval_tokens` of the add-one unigram model of `train_tokens`.

  p(w) = (count(w) + 1) / (N + V).
  """
  counts = np.bincount(train_tokens, minlength=vocab_size).astype(np.float64) + 1.0
  log_probs = np.log(counts / counts.sum())
  return math.exp(-float(log_probs[eval_tokens].mean()))
