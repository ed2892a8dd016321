"""The attention memory: a masked, fixed-length buffer of past states carried through a scan.

Slot 0 is the zero slot h_0 = 0 (valid when `zero_slot` is on; the released code and the
averaging paper both have it); slots 1.. hold h_1, h_2, ... in order. At time step t the
buffer holds [h_0 = 0, h_1 .. h_{t-1}]: the context for step t is read *before* h_t is written
(write-after-read), so a step never attends to its own state (Salton et al. 2017, sec. 3;
Salton & Kelleher 2018, eq. 10). Positions past a sentence's length are never marked valid,
so padding is never attended to. Once the buffer is full, new states overwrite the oldest
ones (slots 1.. act as a ring): a sliding window over the last `capacity - 1` states.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp


class Memory(NamedTuple):
  """states [B, L, D]; mask [B, L] (slot holds a real state); written: states written so far."""
  states: jax.Array
  mask: jax.Array
  written: jax.Array


def empty(batch_size: int, capacity: int, dim: int, zero_slot: bool) -> Memory:
  """A buffer of `capacity` slots holding only the zero slot (valid iff `zero_slot`)."""
  states = jnp.zeros((batch_size, capacity, dim), jnp.float32)
  mask = jnp.zeros((batch_size, capacity), bool).at[:, 0].set(zero_slot)
  return Memory(states, mask, jnp.zeros((), jnp.int32))


def write(memory: Memory, state: jax.Array, valid: jax.Array) -> Memory:
  """Writes `state` [B, D] into the next slot; rows with `valid` [B] False stay masked."""
  capacity = memory.states.shape[1]
  slot = 1 + memory.written % (capacity - 1)
  states = jax.lax.dynamic_update_slice_in_dim(memory.states, state[:, None], slot, axis=1)
  mask = jax.lax.dynamic_update_slice_in_dim(memory.mask, valid[:, None], slot, axis=1)
  return Memory(states, mask, memory.written + 1)


def shifted(outputs: jax.Array) -> jax.Array:
  """The buffer contents seen by a whole sequence at once: [0, h_1 .. h_{T-1}], [B, T, D].

  `outputs` [B, T, D] are h_1 .. h_T; the last one is never read inside the sequence.
  """
  return jnp.pad(outputs[:, :-1], ((0, 0), (1, 0), (0, 0)))


def causal_mask(lengths: jax.Array, num_steps: int, zero_slot: bool) -> jax.Array:
  """Validity of slot s at step t for a whole sequence at once, [B, T, L=T] (parallel form).

  Counting steps from 0, step t has written its t earlier outputs into slots 1..t, so slot
  s >= 1 is valid iff s <= t and its output is a real token's (s <= length); the zero slot is
  valid iff `zero_slot`. This equals the mask `write` builds step by step in the scan.
  """
  step = jnp.arange(num_steps)[:, None]
  slot = jnp.arange(num_steps)[None, :]
  visible = (slot >= 1) & (slot <= step)
  if zero_slot:
    visible = visible | (slot == 0)
  real = (slot[None] <= lengths[:, None, None]) | (slot[None] == 0)
  return visible[None] & real
