"""Attention that feeds the recurrence: the DAS LM and the LSTMN, one LSTM step at a time.

Both read buffers (`memory.Memory`) inside the time scan's step (`models._time_step`): their
queries depend on the step before, so they have no parallel form. The LSTMN's tapes are
carried through the scan; the DAS buffer holds inputs, known before it, so a scan cuts each
step's buffer from the window's whole sequence of inputs (`das_sequence`, `das_buffer_at`)
and `models.step` carries it as a ring.

DAS LM (Cao & Yu, "Deep Attentive Structured Language Model based on LSTM", eqs. 5-8):

    w_t = E x_t
    e_i = v . tanh(W_w w_i + W_h h_{t-1} + b_att) + b_v        i = 1..t (current input too)
    a = softmax(e);  w'_t = sum_i a_i w_i;  LSTM input [w_t; w'_t]

LSTMN (Cheng, Dong & Lapata 2016, as written in Cao & Yu eqs. 1-4):

    e_i = v . tanh(W_h h_i + W_x x_t + W_~h ~h_{t-1})         over the tape [h_0 = 0, h_1 ..]
    a = softmax(e);  ~h_t = sum_i a_i h_i;  ~c_t = sum_i a_i c_i
    (h_t, c_t) = LSTM(x_t, (~h_t, ~c_t))

b_v is left out (softmax(e + b_v) = softmax(e)); the tapes hold the first LSTM layer's states
(`config.tape_slots` > 0: h_0 and the last tape_slots - 1 of them, a ring as `memory.write`).
Each buffer caches the part of the score that depends on the slot alone (`das_keys`: W_w w_i;
`lstmn_key`: W_h h_i), computed once when the slot is written, so a step costs O(L H) rather
than O(L H^2). The buffers, POS inputs and DAS-LSTMN: docs/models.md, "The DAS LM and the
LSTMN".
"""

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from attnlm_jax.models import lstm
from attnlm_jax.models import memory as memory_lib
from attnlm_jax.models import nn

# The DAS input streams, in the order their embeddings are concatenated.
STREAMS = ("words", "tags")


class Tapes(NamedTuple):
  """The LSTMN's memory: hidden and cell tapes (one shared mask) and the last read ~h_{t-1}."""
  h: memory_lib.Memory
  c: memory_lib.Memory
  read: jax.Array


def init(rng: jax.Array, recurrence: tuple[str, ...], *, hidden_size: int,
         stream_sizes: dict, init_scale: float) -> dict:
  """Parameters of the attentions in `recurrence`: U(-init_scale, init_scale), biases 0.

  stream_sizes: input stream name -> embedding size: the DAS buffer's slices, and together
  the LSTMN query's x_t (m_t = [w_t; p_t] with POS tags, Cao & Yu sec. 3.3).
  """
  uniform = lambda key, *shape: nn.uniform_init(key, shape, init_scale)
  params = {}
  rng_das, rng_lstmn = jax.random.split(rng)
  if "das" in recurrence:
    params["das"] = {}
    for key, (stream, size) in zip(jax.random.split(rng_das, len(stream_sizes)),
                                   stream_sizes.items()):
      k_w, k_h, k_v = jax.random.split(key, 3)
      params["das"][stream] = {"w_w": uniform(k_w, size, hidden_size),
                               "w_h": uniform(k_h, hidden_size, hidden_size),
                               "b_att": jnp.zeros((hidden_size,), jnp.float32),
                               "v": uniform(k_v, hidden_size)}
  if "lstmn" in recurrence:
    k_h, k_x, k_r, k_v = jax.random.split(rng_lstmn, 4)
    params["lstmn"] = {"w_h": uniform(k_h, hidden_size, hidden_size),
                       "w_x": uniform(k_x, sum(stream_sizes.values()), hidden_size),
                       "w_r": uniform(k_r, hidden_size, hidden_size),
                       "v": uniform(k_v, hidden_size)}
  return params


def das_key(params: dict, inputs: jax.Array, compute_dtype=jnp.float32) -> jax.Array:
  """The slot's part of Cao & Yu eq. 6, k_i = W_w w_i: inputs [..., D] -> [..., A]."""
  return nn.dot(inputs, params["w_w"], compute_dtype)


def das_scores(params: dict, keys: jax.Array, h_prev: jax.Array,
               compute_dtype=jnp.float32) -> jax.Array:
  """Cao & Yu eq. 6 without b_v: e_i = v . tanh(k_i + W_h h_{t-1} + b_att), k_i = W_w w_i.

  keys [B, L, A] (`das_key` of w_i), h_prev [B, H] -> e [B, L].
  """
  query = nn.dot(h_prev, params["w_h"], compute_dtype) + params["b_att"]       # [B, A]
  return nn.einsum("bla,a->bl", jnp.tanh(keys + query[:, None]), params["v"])


def lstmn_key(params: dict, tape_h: jax.Array, compute_dtype=jnp.float32) -> jax.Array:
  """The slot's part of Cheng et al. (2016) / Cao & Yu eq. 1, k_i = W_h h_i:
  tape_h [..., H] -> [..., H]."""
  return nn.dot(tape_h, params["w_h"], compute_dtype)


def lstmn_scores(params: dict, keys: jax.Array, x: jax.Array, read_prev: jax.Array,
                 compute_dtype=jnp.float32) -> jax.Array:
  """Cheng et al. (2016) / Cao & Yu eq. 1: e_i = v . tanh(k_i + W_x x_t + W_~h ~h_{t-1}),
  k_i = W_h h_i.

  keys [B, L, H] (`lstmn_key` of the tape), x [B, X], read_prev [B, H] -> e [B, L].
  """
  query = (nn.dot(x, params["w_x"], compute_dtype)
           + nn.dot(read_prev, params["w_r"], compute_dtype))                   # [B, H]
  return nn.einsum("blh,h->bl", jnp.tanh(keys + query[:, None]), params["v"])


def weighted_sum(weights: jax.Array, states: jax.Array) -> jax.Array:
  """Cao & Yu eqs. 3 and 8: sum_i a_i s_i, weights [B, L] x states [B, L, D] -> [B, D]."""
  return nn.einsum("bl,bld->bd", weights, states)


def _stream_slices(params: dict) -> list[tuple[str, slice]]:
  """(name, its slice of the buffer's features) of each DAS input stream that `params` attend
  over, in `STREAMS` order (the order their embeddings are concatenated)."""
  slices, start = [], 0
  for stream in (s for s in STREAMS if s in params):
    size = params[stream]["w_w"].shape[0]
    slices.append((stream, slice(start, start + size)))
    start += size
  return slices


def das_keys(params: dict, inputs: jax.Array, compute_dtype=jnp.float32) -> jax.Array:
  """Every stream's `das_key` of inputs [..., D], each stream over its own slice of the
  features (`_stream_slices`): [..., streams, A]."""
  return jnp.stack([das_key(params[stream], inputs[..., features], compute_dtype)
                    for stream, features in _stream_slices(params)], axis=-2)


def das_read(params: dict, inputs: memory_lib.Memory, h_prev: jax.Array,
             compute_dtype=jnp.float32) -> tuple[jax.Array, dict]:
  """The DAS context m'_t = [w'_t; p'_t] (eqs. 6-8, 19) over the buffer of inputs m_1..m_t
  and their cached `das_keys`.

  params: stream name -> that stream's attention; each stream reads its own slice of the
  buffer's features (`_stream_slices`). Returns (context [B, D], stream -> weights [B, L]).
  """
  contexts, weights = [], {}
  for index, (stream, features) in enumerate(_stream_slices(params)):
    history = inputs.states[..., features]
    weights[stream] = nn.masked_softmax(
        das_scores(params[stream], inputs.keys[..., index, :], h_prev, compute_dtype),
        inputs.mask)
    contexts.append(weighted_sum(weights[stream], history))
  return jnp.concatenate(contexts, axis=-1), weights


def lstmn_read(params: dict, tapes: Tapes, x: jax.Array,
               compute_dtype=jnp.float32) -> tuple[lstm.LSTMState, jax.Array]:
  """(~h_t, ~c_t) = sum_i a_i (h_i, c_i) over the tapes (eqs. 1-3) and the h tape's cached
  `lstmn_key`s; returns them and a [B, L]."""
  weights = nn.masked_softmax(
      lstmn_scores(params, tapes.h.keys, x, tapes.read, compute_dtype), tapes.h.mask)
  return lstm.LSTMState(weighted_sum(weights, tapes.h.states),
                        weighted_sum(weights, tapes.c.states)), weights


def empty_inputs(batch_size: int, capacity: int, dim: int) -> memory_lib.Memory:
  """The DAS buffer: `capacity` input embeddings of size `dim` (slot 0 stays unused), without
  keys (`with_keys` adds them)."""
  return memory_lib.empty(batch_size, capacity + 1, dim, zero_slot=False)


def empty_tapes(batch_size: int, capacity: int, hidden_size: int, zero_slot: bool) -> Tapes:
  """Tapes holding only h_0 = c_0 = 0 (visible iff `zero_slot`), and ~h_0 = 0, without keys
  (`with_keys` adds them)."""
  buffer = memory_lib.empty(batch_size, capacity, hidden_size, zero_slot)
  return Tapes(buffer, buffer, jnp.zeros((batch_size, hidden_size), jnp.float32))


def with_keys(params: dict, inputs: Optional[memory_lib.Memory], tapes: Optional[Tapes],
              compute_dtype=jnp.float32):
  """The DAS buffer and the LSTMN tapes (either None when the model has none) with their keys
  computed from the states they hold, with `params` (the "recurrent" parameters)."""
  if inputs is not None:
    inputs = inputs._replace(keys=das_keys(params["das"], inputs.states, compute_dtype))
  if tapes is not None:
    keys = lstmn_key(params["lstmn"], tapes.h.states, compute_dtype)
    tapes = tapes._replace(h=tapes.h._replace(keys=keys))
  return inputs, tapes


def das_sequence(params: dict, buffer: memory_lib.Memory, embedded: jax.Array,
                 valid: jax.Array, fresh: bool,
                 compute_dtype=jnp.float32) -> tuple[memory_lib.Memory, int]:
  """Every slot of the DAS buffer that a window's steps read, known before its scan (the buffer
  holds inputs, not states): [the carried buffer, oldest first; m_1 .. m_T] with their keys,
  or [slot 0; m_1 .. m_T] for a `fresh` buffer, which holds nothing yet.

  buffer: the DAS buffer before the window, with keys (`with_keys`); embedded [T, B, D];
  valid [T, B]. Returns (the sequence, the index of m_1 in it).
  """
  before = (memory_lib.Memory(buffer.states[:, :1], buffer.mask[:, :1], buffer.written,
                              buffer.keys[:, :1])
            if fresh else memory_lib.chronological(buffer))
  window = jnp.swapaxes(embedded, 0, 1)                                        # [B, T, D]
  join = lambda a, b: jnp.concatenate([a, b], axis=1)
  sequence = memory_lib.Memory(join(before.states, window), join(before.mask, valid.T),
                               jnp.zeros((), jnp.int32),
                               join(before.keys, das_keys(params, window, compute_dtype)))
  return sequence, before.states.shape[1]


def das_buffer_at(sequence: memory_lib.Memory, last: jax.Array,
                  capacity: int) -> memory_lib.Memory:
  """The DAS buffer of `capacity` slots once the input at index `last` of `das_sequence` is
  written: the last capacity - 1 inputs up to it, oldest first, behind one masked slot (the
  slots of `write_inputs`'s ring, in time order)."""
  start = jnp.clip(last - (capacity - 1), 0, sequence.states.shape[1] - capacity)
  take = lambda x: jax.lax.dynamic_slice_in_dim(x, start, capacity, axis=1)
  index = start + jnp.arange(capacity)
  recent = (index <= last) & (index > last - (capacity - 1))
  return memory_lib.Memory(take(sequence.states), take(sequence.mask) & recent[None],
                           sequence.written, take(sequence.keys))


@functools.partial(jax.checkpoint, static_argnums=(3, 5))
def das_read_at(params: dict, sequence: memory_lib.Memory, last: jax.Array, capacity: int,
                h_prev: jax.Array, compute_dtype=jnp.float32) -> tuple[jax.Array, dict]:
  """`das_read` over `das_buffer_at(sequence, last, capacity)`, recomputed in the backward
  pass: a scan then keeps one sequence of inputs for every step, where saving each step's
  buffer and [B, L, A] `tanh` made a `das` training step a third slower
  (docs/models.md, "Fast paths")."""
  return das_read(params, das_buffer_at(sequence, last, capacity), h_prev, compute_dtype)


def write_inputs(params: dict, inputs: memory_lib.Memory, embedded: jax.Array,
                 valid: jax.Array, compute_dtype=jnp.float32) -> memory_lib.Memory:
  """Appends m_t [B, D] and its `das_keys` to the DAS buffer (before the read: m_t is read)."""
  return memory_lib.write(inputs, embedded, valid, das_keys(params, embedded, compute_dtype))


def write_tapes(params: dict, tapes: Tapes, state: lstm.LSTMState, read: lstm.LSTMState,
                valid: jax.Array, compute_dtype=jnp.float32) -> Tapes:
  """Appends (h_t, c_t) and h_t's `lstmn_key` to the tapes after the step; keeps ~h_t as the
  next query's ~h_{t-1}."""
  return Tapes(memory_lib.write(tapes.h, state.h, valid,
                                lstmn_key(params, state.h, compute_dtype)),
               memory_lib.write(tapes.c, state.c, valid), read.h)
