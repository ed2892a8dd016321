"""A pure functional LSTM over a params pytree, with the four gates as one fused matmul.

Per layer, params are `{"w_x": [D_in, 4H], "w_h": [H, 4H], "b": [4H]}` with the gates in the
order (input i, forget f, cell g, output o):

    z_t = x_t W_x + h_{t-1} W_h + b
    i, f, g, o = sigmoid(z_i), sigmoid(z_f), tanh(z_g), sigmoid(z_o)
    c_t = f * c_{t-1} + i * g
    h_t = o * tanh(c_t)

(Hochreiter & Schmidhuber 1997; the formulation of Zaremba et al. 2015 that all the papers
use.) `x_t W_x` does not depend on the recurrence, so callers compute it for every time step
at once (one large matmul) and the scanned step only does `h_{t-1} W_h`.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp

from attnlm_jax import nn


class LSTMState(NamedTuple):
  """The recurrent state of one layer: hidden h [B, H] and cell c [B, H]."""
  h: jax.Array
  c: jax.Array


def init_layer(rng: jax.Array, input_size: int, hidden_size: int, init_scale: float,
               forget_bias: float) -> dict:
  """One layer's params: weights U(-init_scale, init_scale), biases 0 (+forget_bias on f)."""
  rng_x, rng_h = jax.random.split(rng)
  bias = jnp.zeros((4, hidden_size), jnp.float32).at[1].set(forget_bias)
  return {
      "w_x": nn.uniform_init(rng_x, (input_size, 4 * hidden_size), init_scale),
      "w_h": nn.uniform_init(rng_h, (hidden_size, 4 * hidden_size), init_scale),
      "b": bias.reshape(-1),
  }


def zero_state(batch_size: int, hidden_size: int) -> LSTMState:
  """h_0 = c_0 = 0: every sentence starts from a zero state."""
  zeros = jnp.zeros((batch_size, hidden_size), jnp.float32)
  return LSTMState(zeros, zeros)


def input_gates(layer: dict, x: jax.Array, compute_dtype=jnp.float32) -> jax.Array:
  """The input half of the gate pre-activations, `x W_x + b`, for any leading shape."""
  return nn.dot(x, layer["w_x"], compute_dtype) + layer["b"]


def cell(layer: dict, gates_x: jax.Array, state: LSTMState,
         compute_dtype=jnp.float32) -> LSTMState:
  """One LSTM step given the precomputed input gates `x_t W_x + b` [B, 4H]."""
  z = gates_x + nn.dot(state.h, layer["w_h"], compute_dtype)
  i, f, g, o = jnp.split(z, 4, axis=-1)
  c = jax.nn.sigmoid(f) * state.c + jax.nn.sigmoid(i) * jnp.tanh(g)
  h = jax.nn.sigmoid(o) * jnp.tanh(c)
  return LSTMState(h, c)


def scan_layer(layer: dict, gates_x: jax.Array, state: LSTMState, compute_dtype=jnp.float32,
               unroll: int = 1) -> tuple[LSTMState, jax.Array]:
  """Runs one layer over time: `gates_x` [T, B, 4H] time-major -> (final state, h [T, B, H])."""

  def step(carry, gx):
    carry = cell(layer, gx, carry, compute_dtype)
    return carry, carry.h

  return jax.lax.scan(step, state, gates_x, unroll=unroll)
