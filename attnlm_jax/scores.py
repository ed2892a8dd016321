"""Attention score functions over the memory buffer: a registry of pure functions.

Every function has the signature

    attend(params, query [B, T, H], memory [B, L, H], mask [B, T, L], compute_dtype)
        -> (context [B, T, H], weights [B, T, L])

where `mask[b, t, i]` says slot i of the memory is visible to query t (see `memory.py`).
The same function serves the scan (T = 1 per step) and the parallel form (all T at once).

Adding a score takes one function, one `SCORE_FUNCTIONS` entry (the function, its parameter
shapes and the output layer it feeds, see `heads.py`) and one config value
(`config.model.score`).

A second kind of entry names attention that feeds the recurrence instead of the output layer
(`Score.recurrence`, computed inside the LSTM step by `recurrent.py`): the DAS LM's attention
over the input history and the LSTMN's attention over its hidden and cell tapes.
"""

import dataclasses
from typing import Callable, Optional

import jax
import jax.numpy as jnp

from attnlm_jax import nn
from attnlm_jax.errors import ConfigError


def single(params: dict, query, memory, mask, compute_dtype=jnp.float32):
  """Salton et al. (2017) eq. 9: e_i = v . tanh(W_s h_i), a = softmax(e), c_t = sum a_i h_i.

  The score does not depend on the query, only on the slots (no biases in the score).
  """
  del query
  keys = jnp.tanh(nn.dot(memory, params["w_s"], compute_dtype))      # [B, L, H]
  scores = jnp.einsum("blh,h->bl", keys, params["v"])[:, None, :]     # [B, 1, L]
  weights = nn.masked_softmax(scores, mask)
  return _weighted_sum(weights, memory), weights


def combined(params: dict, query, memory, mask, compute_dtype=jnp.float32):
  """Salton et al. (2017) eq. 10: e_i = v . tanh(W_s h_i + W_q h_t), W_q h_t once per step."""
  keys = nn.dot(memory, params["w_s"], compute_dtype)                 # [B, L, H]
  queries = nn.dot(query, params["w_q"], compute_dtype)               # [B, T, H]
  hidden = jnp.tanh(keys[:, None, :, :] + queries[:, :, None, :])    # [B, T, L, H]
  weights = nn.masked_softmax(jnp.einsum("btlh,h->btl", hidden, params["v"]), mask)
  return _weighted_sum(weights, memory), weights


def average(params: dict, query, memory, mask, compute_dtype=jnp.float32):
  """Salton & Kelleher (2018) eq. 10: c_t = mean of the valid slots, (1/t) sum_{i<t} h_i."""
  del params, query, compute_dtype
  weights = nn.masked_mean_weights(mask)
  return _weighted_sum(weights, memory), weights


def conv1x1(params: dict, query, memory, mask, compute_dtype=jnp.float32):
  """The convolutional-attention LM's context: a 1x1 convolution over the context map.

  The context map stacks the weighted slots cm_i = a_i h_i (a_i from the `combined` score);
  a 1x1 convolution whose input channels are the slots reduces it to one vector,
  c_t = sum_{i>=1} w_i a_i h_i + b (a learned weight per slot; the zero slot holds 0).
  Slots past the number of weights share the last weight.
  """
  _, weights = combined(params, query, memory, mask, compute_dtype)
  num_slots = memory.shape[1]
  slot_index = jnp.clip(jnp.arange(num_slots) - 1, 0, params["slot_w"].shape[0] - 1)
  slot_weight = jnp.where(jnp.arange(num_slots) >= 1, params["slot_w"][slot_index], 0.0)
  context = _weighted_sum(weights * slot_weight, memory) + params["slot_b"]
  return context, weights


def _weighted_sum(weights: jax.Array, memory: jax.Array) -> jax.Array:
  """c_t = sum_i a_ti h_i as one batched matmul: [B, T, L] x [B, L, H] -> [B, T, H]."""
  return jnp.einsum("btl,blh->bth", weights, memory)


@dataclasses.dataclass(frozen=True)
class Score:
  """A registry entry.

  attend: the score function, or None for models without attention.
  params: parameter name -> (shape, initialiser); shapes use "H" (hidden size) and "S" (the
    number of memory slots after the zero slot, max_len - 1); initialisers are "uniform"
    (U(-init_scale, init_scale)), "zeros" and "ones".
  head: the output layer the context feeds (a key of `heads.HEADS`).
  recurrence: the attentions that run inside the LSTM step and feed the recurrence, a subset
    of ("das", "lstmn") (see `recurrent.py`); empty for models whose context feeds only the
    output layer.
  """
  attend: Optional[Callable]
  params: dict
  head: str
  recurrence: tuple[str, ...] = ()

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
    "single": Score(single, _SCORE_WEIGHTS, "merge"),
    "combined": Score(combined, _COMBINED_WEIGHTS, "merge"),
    "average": Score(average, {}, "merge"),
    # The slot weights start at 1, i.e. as the plain `combined` context.
    "conv1x1": Score(conv1x1, {**_COMBINED_WEIGHTS, "slot_w": (("S",), "ones"),
                               "slot_b": ((), "zeros")}, "residual_bn"),
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
