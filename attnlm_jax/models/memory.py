"""The attention memory: a masked buffer of past states, or its O(1) running-mean summary.

At step t the buffer holds [h_0 = 0, h_1 .. h_{t-1}]: the context is read before h_t is
written (Salton et al. 2017, sec. 3; Salton & Kelleher 2018, eq. 10); once full, slots 1..
are a ring. Layout: docs/models.md, "The memory"; windows carried across a stream: "The
stream protocol"; cached keys and `RunningMean` (online softmax): "Fast paths".
"""

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from attnlm_jax.models import nn


class Memory(NamedTuple):
  """states [B, L, D]; mask [B, L] (slot holds a real state); written: states written so far;
  keys [B, L, ...] (each slot's key, `scores.Score.key`) or None."""
  states: jax.Array
  mask: jax.Array
  written: jax.Array
  keys: Optional[jax.Array] = None


def empty(batch_size: int, capacity: int, dim: int, zero_slot: bool) -> Memory:
  """A buffer of `capacity` slots holding only the zero slot (valid iff `zero_slot`)."""
  states = jnp.zeros((batch_size, capacity, dim), jnp.float32)
  mask = jnp.zeros((batch_size, capacity), bool).at[:, 0].set(zero_slot)
  return Memory(states, mask, jnp.zeros((), jnp.int32))


def write(memory: Memory, state: jax.Array, valid: jax.Array,
          key: Optional[jax.Array] = None) -> Memory:
  """Writes `state` [B, D] (and its `key` [B, ...] into `memory.keys`) into the next slot;
  rows with `valid` [B] False stay masked."""
  capacity = memory.states.shape[1]
  slot = 1 + memory.written % (capacity - 1)
  put = lambda buffer, value: jax.lax.dynamic_update_slice_in_dim(buffer, value[:, None],
                                                                  slot, axis=1)
  keys = memory.keys if key is None else put(memory.keys, key.astype(memory.keys.dtype))
  return Memory(put(memory.states, state), put(memory.mask, valid), memory.written + 1, keys)


def slot_mask(lengths: jax.Array, num_slots: int, zero_slot: bool) -> jax.Array:
  """Which slots of [0, h_1 .. h_{L-1}] hold a real state, [B, L]: slot s >= 1 iff
  s <= length (its output is a real token's), the zero slot iff `zero_slot`."""
  slot = jnp.arange(num_slots)[None, :]
  return ((slot >= 1) & (slot <= lengths[:, None])) | ((slot == 0) & zero_slot)


def shifted(outputs: jax.Array) -> jax.Array:
  """The buffer contents seen by a whole sequence at once: [0, h_1 .. h_{T-1}], [B, T, D].

  `outputs` [B, T, D] are h_1 .. h_T; the last one is never read inside the sequence.
  """
  return jnp.pad(outputs[:, :-1], ((0, 0), (1, 0), (0, 0)))


def causal_mask(lengths: jax.Array, num_steps: int, zero_slot: bool) -> jax.Array:
  """Validity of slot s at step t for a whole sequence at once, [B, T, L=T] (parallel form).

  Counting steps from 0, step t has written its t earlier outputs into slots 1..t, so slot
  s is visible iff s <= t, and valid iff it also holds a real state (`slot_mask`). This
  equals the mask `write` builds step by step in the scan.
  """
  visible = jnp.arange(num_steps)[None, :] <= jnp.arange(num_steps)[:, None]      # [T, L]
  return visible[None] & slot_mask(lengths, num_steps, zero_slot)[:, None, :]


def slot_positions(memory: Memory) -> jax.Array:
  """The sentence position s of the state h_s in each slot, [L]: 0 for the zero slot; in the
  ring of slots 1..L-1, the latest s <= written with (s - 1) % (L - 1) == slot - 1 (`write`'s
  slot for h_s). A slot not written yet, masked, gets its own index, as in a buffer that never
  wraps."""
  ring = memory.states.shape[1] - 1
  slot = jnp.arange(1, ring + 1)
  laps = jnp.maximum(memory.written - slot, 0) // ring
  return jnp.concatenate([jnp.zeros((1,), slot.dtype), slot + ring * laps])


def chronological(memory: Memory) -> Memory:
  """The buffer with slots 1.. rotated oldest first (the zero slot stays at 0), and the next
  write going to slot 1 (the oldest): the same buffer for `write` and for every read."""
  ring = memory.states.shape[1] - 1
  oldest = memory.written % ring
  rotate = lambda x: jnp.concatenate([x[:, :1], jnp.roll(x[:, 1:], -oldest, axis=1)], axis=1)
  keys = None if memory.keys is None else rotate(memory.keys)
  return Memory(rotate(memory.states), rotate(memory.mask), jnp.zeros((), jnp.int32), keys)


def window_mask(carried_mask: jax.Array, lengths: jax.Array, num_steps: int) -> jax.Array:
  """Visibility [B, T, L + T] of the slots [carried buffer (`chronological`, L slots); the
  window's states h_0 .. h_{T-1}] to the window's steps t = 0 .. T-1.

  Step t sees the zero slot (if it is valid) and the last L - 1 states before it: carried
  slot j >= 1 (the state L - j steps before the window) iff j > t, and the window's state i
  iff t - (L - 1) <= i < t and i is a real token's (i < length).
  """
  capacity = carried_mask.shape[1]
  step = jnp.arange(num_steps)[:, None]
  slot = jnp.arange(capacity)[None, :]
  carried = ((slot == 0) | (slot > step))[None] & carried_mask[:, None, :]      # [B, T, L]
  state = jnp.arange(num_steps)[None, :]
  recent = (state < step) & (state >= step - (capacity - 1))                   # [T, T]
  own = recent[None] & (state < lengths[:, None])[:, None, :]                  # [B, T, T]
  return jnp.concatenate([carried, own], axis=-1)


def window_tail(states: jax.Array, mask: jax.Array, capacity: int,
                keys: Optional[jax.Array] = None) -> Memory:
  """The buffer after a window: slots [carried; window] (states [B, S, D], mask [B, S],
  S >= capacity, slot 0 the zero slot) cut to the zero slot and the last `capacity - 1`,
  oldest first (`chronological`)."""
  keep = lambda x: None if x is None else jnp.concatenate(
      [x[:, :1], x[:, x.shape[1] - (capacity - 1):]], axis=1)
  return Memory(keep(states), keep(mask), jnp.zeros((), jnp.int32), keep(keys))


class RunningMean(NamedTuple):
  """The online-softmax summary (Milakov & Gimelshein 2018) of the valid slots so far, with
  m = `max`: total = sum_i exp(e_i - m) [B], weighted = sum_i exp(e_i - m) h_i [B, D]."""
  max: jax.Array
  total: jax.Array
  weighted: jax.Array


def _merge(a: RunningMean, b: RunningMean) -> RunningMean:
  """The summary of two disjoint sets of slots (associative; any leading shape)."""
  top = jax.lax.stop_gradient(jnp.maximum(a.max, b.max))   # any m gives the same mean
  scale_a, scale_b = jnp.exp(a.max - top), jnp.exp(b.max - top)
  return RunningMean(top, a.total * scale_a + b.total * scale_b,
                     a.weighted * scale_a[..., None] + b.weighted * scale_b[..., None])


def _slots(scores: jax.Array, states: jax.Array, valid: jax.Array) -> RunningMean:
  """Each slot alone as a summary: (e_i, 1, h_i) if valid, else an empty one."""
  weight = valid.astype(states.dtype)
  return RunningMean(jnp.where(valid, scores, nn.MASKED_SCORE), weight,
                     states * weight[..., None])


def running_empty(batch_size: int, dim: int, zero_slot: bool) -> RunningMean:
  """The summary before any write: the zero slot alone (score v . tanh(W_s 0) = 0, state 0;
  `average`'s scores are all 0) when `zero_slot`, else no slot."""
  batch = jnp.full((batch_size,), zero_slot, bool)
  return _slots(jnp.zeros((batch_size,)), jnp.zeros((batch_size, dim)), batch)


def running_write(running: RunningMean, state: jax.Array, score: jax.Array,
                  valid: jax.Array) -> RunningMean:
  """Adds slot h_t = `state` [B, D] with score e_t = `score` [B] where `valid` [B]."""
  return _merge(running, _slots(score, state, valid))


def running_read(running: RunningMean) -> jax.Array:
  """c = sum_i a_i h_i with a = softmax(e) over the slots written, [B, D]; 0 if none."""
  total = jnp.where(running.total > 0, running.total, 1.0)     # (where: exact gradient)
  return running.weighted / total[..., None]


def prefix_means(scores: jax.Array, states: jax.Array, valid: jax.Array) -> jax.Array:
  """Every step's context of a whole sequence in O(L D) memory: for each t,
  c_t = sum_{i<=t, valid} softmax(e)_i h_i over slots 0..t, [B, L, D].

  scores [B, L], states [B, L, D], valid [B, L]. With the shifted buffer
  [0, h_1 .. h_{T-1}] (`shifted`) and `slot_mask`, c_t is step t's context (the slots it
  sees are exactly 0..t), equal to the buffer form with `causal_mask`.
  """
  summary = jax.lax.associative_scan(_merge, _slots(scores, states, valid), axis=1)
  return running_read(summary)
