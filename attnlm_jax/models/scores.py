"""Attention score functions over the memory buffer: a registry of pure functions.

Each one, for the scan (T = 1 per step) and the parallel form (all T at once):

    attend(params, query [B, T, H], memory [B, L, H], mask [B, T, L], compute_dtype,
           keys=None) -> (context [B, T, H], weights [B, T, L])

`mask[b, t, i]`: slot i is visible to query t; `keys`: the slots' cached `Score.key`. The
scores, their papers and how to add one: docs/models.md, "Score functions".
"""

import dataclasses
from typing import Callable, Optional

import jax
import jax.numpy as jnp

from attnlm_jax.common.errors import ConfigError
from attnlm_jax.models import nn


def single_key(params: dict, memory, compute_dtype=jnp.float32):
  """The `single` score of each slot, e_i = v . tanh(W_s h_i): memory [B, L, H] -> [B, L]."""
  keys = jnp.tanh(nn.dot(memory, params["w_s"], compute_dtype))
  return nn.einsum("blh,h->bl", keys, params["v"])


def single(params: dict, query, memory, mask, compute_dtype=jnp.float32, keys=None):
  """Salton et al. (2017) eq. 9: e_i = v . tanh(W_s h_i), a = softmax(e), c_t = sum a_i h_i.

  keys: the slots' scores (`single_key`), if cached; the score does not depend on the query.
  """
  del query
  scores = single_key(params, memory, compute_dtype) if keys is None else keys
  weights = nn.masked_softmax(scores[:, None, :], mask)                 # [B, T, L]
  return _weighted_sum(weights, memory), weights


def combined_key(params: dict, memory, compute_dtype=jnp.float32):
  """The slot half of the `combined` score, W_s h_i: memory [B, L, H] -> [B, L, H]."""
  return nn.dot(memory, params["w_s"], compute_dtype)


def combined(params: dict, query, memory, mask, compute_dtype=jnp.float32, keys=None):
  """Salton et al. (2017) eq. 10: e_i = v . tanh(W_s h_i + W_q h_t), W_q h_t once per step.

  keys: W_s h_i of every slot (`combined_key`), if cached; computed here otherwise.
  """
  keys = combined_key(params, memory, compute_dtype) if keys is None else keys
  queries = nn.dot(query, params["w_q"], compute_dtype)               # [B, T, H]
  hidden = jnp.tanh(keys[:, None, :, :] + queries[:, :, None, :])    # [B, T, L, H]
  weights = nn.masked_softmax(nn.einsum("btlh,h->btl", hidden, params["v"]), mask)
  return _weighted_sum(weights, memory), weights


def average(params: dict, query, memory, mask, compute_dtype=jnp.float32, keys=None):
  """Salton & Kelleher (2018) eq. 10: c_t = mean of the valid slots, (1/t) sum_{i<t} h_i."""
  del params, query, compute_dtype, keys
  weights = nn.masked_mean_weights(mask)
  return _weighted_sum(weights, memory), weights


def conv1x1(params: dict, query, memory, mask, compute_dtype=jnp.float32, keys=None,
            positions=None):
  """The convolutional-attention LM's context: a 1x1 convolution over the context map.

  The context map stacks the weighted slots cm_i = a_i h_i (a_i from the `combined` score,
  with the same cached `keys`); a 1x1 convolution whose input channels are the slots reduces
  it to one vector, c_t = sum_{i>=1} w_i a_i h_i + b (a learned weight per sentence position i;
  the zero slot holds 0). Positions past the number of weights share the last weight.

  positions: the sentence position i of each slot's state, [L] (`memory.slot_positions`, for a
  ring buffer that has wrapped); by default the slot index, as in a buffer that never wraps.
  """
  _, weights = combined(params, query, memory, mask, compute_dtype, keys)
  positions = jnp.arange(memory.shape[1]) if positions is None else positions
  slot_index = jnp.clip(positions - 1, 0, params["slot_w"].shape[0] - 1)
  slot_weight = jnp.where(positions >= 1, params["slot_w"][slot_index], 0.0)
  context = _weighted_sum(weights * slot_weight, memory) + params["slot_b"]
  return context, weights


def _weighted_sum(weights: jax.Array, memory: jax.Array) -> jax.Array:
  """c_t = sum_i a_ti h_i as one batched matmul: [B, T, L] x [B, L, H] -> [B, T, H]."""
  return nn.einsum("btl,blh->bth", weights, memory)


def attend_in_blocks(score: "Score", params: dict, query, memory, mask,
                     compute_dtype=jnp.float32, max_elements: int = 2**26):
  """`score.attend` of every query [B, T, H] at once, the slots' keys computed once.

  The queries go in blocks of Q = max(1, max_elements // (B L H)) steps (`lax.map`, each
  rematerialised), so the `combined` [B, Q, L, H] tensor stays under `max_elements` elements
  (docs/models.md, "Fast paths").
  """
  keys = None if score.key is None else score.key(params, memory, compute_dtype)
  batch_size, num_steps, hidden = query.shape
  block = max(1, max_elements // (batch_size * memory.shape[1] * hidden))
  if num_steps <= block:
    return score.attend(params, query, memory, mask, compute_dtype, keys)
  num_blocks = -(-num_steps // block)
  pad = num_blocks * block - num_steps

  def blocks(x):          # [B, T, ...] -> [num_blocks, B, block, ...]
    x = jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2))
    return jnp.moveaxis(x.reshape(batch_size, num_blocks, block, *x.shape[2:]), 1, 0)

  @jax.checkpoint
  def one_block(inputs):
    query_block, mask_block = inputs
    return score.attend(params, query_block, memory, mask_block, compute_dtype, keys)

  context, weights = jax.lax.map(one_block, (blocks(query), blocks(mask)))
  unblock = lambda x: jnp.moveaxis(x, 0, 1).reshape(batch_size, -1, *x.shape[3:])[:, :num_steps]
  return unblock(context), unblock(weights)


@dataclasses.dataclass(frozen=True)
class Score:
  """A registry entry.

  attend: the score function, or None for models without attention.
  params: parameter name -> (shape, initialiser); shapes use "H" (hidden size) and "S" (the
    number of memory slots after the zero slot, max_len - 1); initialisers are "uniform"
    (U(-init_scale, init_scale)), "xavier" (`nn.xavier_init`), "zeros" and "ones".
  head: the output layer the context feeds (a key of `heads.HEADS`).
  recurrence: the attentions that run inside the LSTM step and feed the recurrence, a subset
    of ("das", "lstmn") (see `recurrent.py`); empty for models whose context feeds only the
    output layer.
  key: key(params, memory [B, L, H], compute_dtype) -> keys [B, L, ...], the part of the
    score that depends on the slot alone, which `attend(..., keys=)` accepts precomputed;
    None when there is none.
  streaming: the context is a softmax-weighted mean of the slots with query-independent
    scores (`key`, or all 0 without one): an O(1) running mean can replace the buffer
    (`memory.RunningMean`).
  inert: parameters that training cannot move (a batch norm over the batch cancels them) but
    that act at evaluation; dynamic evaluation leaves them as trained (docs/testtime.md).
  positional: the score weights a slot by the sentence position of its state, which `attend`
    takes as `positions=` (`memory.slot_positions`) once a ring buffer has wrapped.
  """
  attend: Optional[Callable]
  params: dict
  head: str
  recurrence: tuple[str, ...] = ()
  key: Optional[Callable] = None
  streaming: bool = False
  inert: tuple[str, ...] = ()
  positional: bool = False

  @property
  def feeds_recurrence(self) -> bool:
    """True when the attention runs inside the recurrence (no parallel form exists)."""
    return bool(self.recurrence)


_SCORE_WEIGHTS = {"w_s": (("H", "H"), "uniform"), "v": (("H",), "uniform")}
_COMBINED_WEIGHTS = {**_SCORE_WEIGHTS, "w_q": (("H", "H"), "uniform")}

SCORE_FUNCTIONS = {
    # Baseline LSTM LM (Zaremba et al. 2015, tied as Press & Wolf 2016): logits from h_t.
    "none": Score(None, {}, "identity"),
    # Control: the merge layer tanh(W_c [h_t; 0] + b_c) without attention.
    "proj": Score(None, {}, "tanh"),
    "single": Score(single, _SCORE_WEIGHTS, "merge", key=single_key, streaming=True),
    "combined": Score(combined, _COMBINED_WEIGHTS, "merge", key=combined_key),
    "average": Score(average, {}, "merge", streaming=True),
    # The slot weights start at 1, i.e. as the plain `combined` context. The bias b, added
    # to every feature of c_t, is cancelled by the batch norm it feeds in training.
    "conv1x1": Score(conv1x1, {**_COMBINED_WEIGHTS, "slot_w": (("S",), "ones"),
                               "slot_b": ((), "zeros")}, "residual_bn", key=combined_key,
                     inert=("slot_b",), positional=True),
    # Context feeding the recurrence; the output softmax reads h_t (Cao & Yu eq. 15).
    # DAS LM: attention over the input history joins the LSTM input.
    "das": Score(None, {}, "identity", recurrence=("das",)),
    # LSTMN (Cheng et al. 2016): attention over the h and c tapes replaces (h_{t-1}, c_{t-1}).
    "lstmn": Score(None, {}, "identity", recurrence=("lstmn",)),
    # DAS-LSTMN (Cao & Yu sec. 3.3): both.
    "das_lstmn": Score(None, {}, "identity", recurrence=("das", "lstmn")),
}

RECURRENT_SCORES = tuple(name for name, s in SCORE_FUNCTIONS.items() if s.feeds_recurrence)


def get(name: str) -> Score:
  """The registry entry for `name`; an unknown name is a ConfigError listing the valid ones."""
  if name not in SCORE_FUNCTIONS:
    raise ConfigError(f"unknown score {name!r} (config.model.score); "
                      f"choose one of: {', '.join(SCORE_FUNCTIONS)}")
  return SCORE_FUNCTIONS[name]
