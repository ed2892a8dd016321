"""Forward passes of trained models over word sequences, for the analyses.

`forward` gives per-token log-probabilities, the next-word distribution and the attention
weights with the slots each step may see; `slot_labels` names those slots.
"""

import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from attnlm_jax.common import errors
from attnlm_jax import data as data_lib
from attnlm_jax.data import batching
from attnlm_jax.evaluation import evaluate
from attnlm_jax import models
from attnlm_jax.models import losses
from attnlm_jax.models import memory as memory_lib
from attnlm_jax.models import scores

ZERO_SLOT_LABEL = "h0=0"
# Tokens (rows x width) per forward pass, and the shortest time axis. All passes of one
# `forward` call have the same power-of-two width and rows, so each compiles once per model.
CHUNK_TOKENS = 2048
MIN_WIDTH = 16


class AnalysisError(errors.UserError):
  """Bad input to an analysis: a malformed probe file, no sentences, a model without weights."""


def slot_labels(model_config, inputs: Sequence[str]) -> list[str]:
  """What each attention slot holds, named by input word (the x axis of a heatmap).

  The memory of the output-layer scores and the LSTMN's tape are [h_0 = 0, h_1 .. h_{T-1}]:
  slot s >= 1 holds the state after reading inputs[s - 1]. The DAS attention reads the input
  embeddings themselves: slot i is inputs[i] (the current input included).
  """
  if "das" in scores.get(model_config.score).recurrence:
    return list(inputs)
  return [ZERO_SLOT_LABEL, *inputs[:-1]]


def valid_slots(model_config, lengths: np.ndarray, num_steps: int) -> np.ndarray:
  """bool [B, T, L=T]: slot i is visible to step t (the cells an attention row may use).

  DAS: inputs 0..t of the sentence; the others: `memory.causal_mask` (the zero slot, then
  the states of the steps before t), or the zero slot alone under `memory='zero_slot'`
  (`models.visible_slots`).
  """
  if "das" in scores.get(model_config.score).recurrence:
    step = np.arange(num_steps)[:, None]
    slot = np.arange(num_steps)[None, :]
    return (slot <= step)[None] & (slot[None] < np.asarray(lengths)[:, None, None])
  causal = memory_lib.causal_mask(jnp.asarray(lengths), num_steps, model_config.zero_slot)
  return np.asarray(models.visible_slots(model_config, causal))


def _batch(encoded: Sequence[np.ndarray], num_rows: int, width: int) -> dict:
  """One evaluation batch: inputs <eos> w_1..w_n, targets w_1..w_n <eos>, padded to width.

  encoded: at most `num_rows` sentences (word ids then EOS_ID); the missing rows are filled
  with the one-token sentence "<eos>" (their results are dropped).
  """
  filler = [np.asarray([data_lib.EOS_ID], np.int32)] * (num_rows - len(encoded))
  rows = [*encoded, *filler]
  lengths = np.asarray([len(e) for e in rows], np.int64)
  starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
  return batching.make_batch(np.concatenate(rows).astype(np.int32), starts, lengths, width)


@functools.partial(jax.jit, static_argnames=("model_config", "attention"))
def _forward(params, batch, *, model_config, attention: bool):
  """(log p of each target [B, T], log-softmax of the last step of each row [B, V],
  attention weights [B, T, L] or None)."""
  outputs = models.apply(params, model_config, batch["inputs"], batch["lengths"],
                         return_attention=attention)
  logits, weights = outputs if attention else (outputs, None)
  return losses.token_log_probs(logits, batch["targets"]), jax.nn.log_softmax(
      logits[jnp.arange(logits.shape[0]), batch["lengths"] - 1]), weights


def forward(model: evaluate.TrainedModel, sentences: Sequence[Sequence[str]],
            attention: bool = False) -> list[dict]:
  """Runs `models.apply` (evaluation mode) on word sequences, CHUNK_TOKENS at a time.

  Returns, per sentence: "tokens" (the predicted tokens, words then <eos>, unknown words as
  <unk>), "inputs" (<eos> then the words), "log_probs" (natural log p of each token),
  "next_log_probs" (log-softmax [V] of the step after the last word, i.e. the distribution
  of the word after the sequence) and with `attention` "weights" [n, n] (n = words + 1) with
  "mask" [n, n] (`valid_slots`).
  """
  if not sentences:
    raise AnalysisError("no sentences given: pass at least one sentence of words")
  config = model.config.model
  frozen = ml_collections.FrozenConfigDict(config)  # hashable: a static jit argument
  encoded = [np.append(model.vocab.encode(s), data_lib.EOS_ID) for s in sentences]
  width = max(MIN_WIDTH, 1 << (max(map(len, encoded)) - 1).bit_length())
  num_rows = max(1, CHUNK_TOKENS // width)
  results = []
  for first in range(0, len(encoded), num_rows):
    chunk = encoded[first:first + num_rows]
    batch = _batch(chunk, num_rows, width)
    log_probs, next_log_probs, weights = jax.device_get(
        _forward(model.params, batch, model_config=frozen, attention=attention))
    mask = valid_slots(config, batch["lengths"], width) if attention else None
    for row, n in enumerate(batch["lengths"][:len(chunk)]):
      result = {"tokens": model.vocab.decode(batch["targets"][row, :n]),
                "inputs": model.vocab.decode(batch["inputs"][row, :n]),
                "log_probs": np.asarray(log_probs[row, :n], np.float64),
                "next_log_probs": np.asarray(next_log_probs[row], np.float64)}
      if attention:
        result["weights"] = np.asarray(weights[row, :n, :n], np.float64)
        result["mask"] = mask[row, :n, :n]
      results.append(result)
  return results


def words(sentence) -> list[str]:
  """The words of a sentence given as a string (split at whitespace) or a word sequence."""
  return sentence.split() if isinstance(sentence, str) else list(sentence)
