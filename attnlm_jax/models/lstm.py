"""A pure functional LSTM over a params pytree, with the four gates as one fused matmul.

Per layer, params are `{"w_x": [D_in, 4H], "w_h": [H, 4H], "b": [4H]}` with the gates in the
order (input i, forget f, cell g, output o) (Hochreiter & Schmidhuber 1997; Zaremba et al. 2015):

    z_t = x_t W_x + h_{t-1} W_h + b
    i, f, g, o = sigmoid(z_i), sigmoid(z_f), tanh(z_g), sigmoid(z_o)
    c_t = f * c_{t-1} + i * g
    h_t = o * tanh(c_t)

Callers compute `x_t W_x` for every step at once; `scan_layer`'s backward pass is written out
(docs/models.md, "The LSTM").
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from attnlm_jax.models import nn


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


def _update(z: jax.Array, c_prev: jax.Array) -> tuple[LSTMState, jax.Array]:
  """The new state from the pre-activations z [B, 4H], and the activations [i; f; g; o]."""
  z_i, z_f, z_g, z_o = jnp.split(z, 4, axis=-1)
  i, f, g, o = jax.nn.sigmoid(z_i), jax.nn.sigmoid(z_f), jnp.tanh(z_g), jax.nn.sigmoid(z_o)
  c = f * c_prev + i * g
  return LSTMState(o * jnp.tanh(c), c), jnp.concatenate([i, f, g, o], axis=-1)


def cell(layer: dict, gates_x: jax.Array, state: LSTMState,
         compute_dtype=jnp.float32) -> LSTMState:
  """One LSTM step given the precomputed input gates `x_t W_x + b` [B, 4H]: (h_t, c_t) from
  (h_{t-1}, c_{t-1}) by the module docstring's equations."""
  return _update(gates_x + nn.dot(state.h, layer["w_h"], compute_dtype), state.c)[0]


def scan_layer(layer: dict, gates_x: jax.Array, state: LSTMState, compute_dtype=jnp.float32,
               unroll: int = 1) -> tuple[LSTMState, jax.Array]:
  """Runs one layer over time: `gates_x` [T, B, 4H] time-major -> (final state, h [T, B, H]).

  Equal to scanning `cell`, with the backward pass of `_recurrence_bwd`.
  """
  return _recurrence(layer["w_h"], gates_x, state, compute_dtype, unroll)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def _recurrence(w_h, gates_x, state, compute_dtype, unroll):
  return _recurrence_fwd(w_h, gates_x, state, compute_dtype, unroll)[0]


def _recurrence_fwd(w_h, gates_x, state, compute_dtype, unroll):
  """The forward scan; keeps h_t, c_t and the gate activations of every step."""

  def step(carry, gx):
    new, activations = _update(gx + nn.dot(carry.h, w_h, compute_dtype), carry.c)
    return new, (new.h, new.c, activations)

  final, (hs, cs, activations) = jax.lax.scan(step, state, gates_x, unroll=unroll)
  return (final, hs), (w_h, state, hs, cs, activations)


def _recurrence_bwd(compute_dtype, unroll, residuals, cotangents):
  """Backpropagation through time. With dh_t = dL/dh_t (from the output and from step t+1):

      dc_t = dc_{t+1 -> t} + dh_t o (1 - tanh^2 c_t)
      dz_t = [dc_t g i (1 - i); dc_t c_{t-1} f (1 - f); dc_t i (1 - g^2); dh_t tanh(c_t) o (1 - o)]
      dh_{t-1} += dz_t W_h^T;  dc_{t-1} = dc_t f
      dW_h = sum_t h_{t-1}^T dz_t;  d gates_x_t = dz_t
  """
  w_h, state, hs, cs, activations = residuals
  d_final, d_hs = cotangents
  c_prev = jnp.concatenate([state.c[None], cs[:-1]])

  def step(carry, xs):
    d_out, c_before, c, act = xs
    i, f, g, o = jnp.split(act, 4, axis=-1)
    dh = carry.h + d_out
    tanh_c = jnp.tanh(c)
    dc = carry.c + dh * o * (1.0 - tanh_c * tanh_c)
    dz = jnp.concatenate([dc * g * i * (1.0 - i), dc * c_before * f * (1.0 - f),
                          dc * i * (1.0 - g * g), dh * tanh_c * o * (1.0 - o)], axis=-1)
    dh_prev = nn.dot_transposed(dz, w_h, compute_dtype)     # dz W_h^T, no copy of W_h^T
    return LSTMState(dh_prev, dc * f), dz

  d_state, dz = jax.lax.scan(step, d_final, (d_hs, c_prev, cs, activations), reverse=True,
                             unroll=unroll)
  h_prev = jnp.concatenate([state.h[None], hs[:-1]])
  d_w = nn.einsum("tbh,tbg->hg", h_prev.astype(compute_dtype), dz.astype(compute_dtype),
                  preferred_element_type=jnp.float32)
  return d_w, dz, d_state


_recurrence.defvjp(_recurrence_fwd, _recurrence_bwd)
