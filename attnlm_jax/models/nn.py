"""Numerical building blocks shared by the LSTM, the score functions and the output layers."""

import functools
import math
from typing import Sequence

import jax
import jax.numpy as jnp

# Large negative score for masked slots (and a running mean's over none): exp() of it
# against any real score underflows to exactly 0 in float32.
MASKED_SCORE = -1e9

# The precision of every matmul of the models: that of its inputs' dtype. float32 inputs are
# multiplied in float32 on TPUs and GPUs too, whose default rounds them to bfloat16 (TPUs) or
# TF32 (GPUs since Ampere), so that `compute_dtype=float32` means float32 everywhere; bfloat16
# inputs (`compute_dtype=bfloat16`, the fast path) are exact in one bfloat16 pass. On a CPU,
# which multiplies float32 in float32 anyway, it changes no bit.
PRECISION = jax.lax.Precision.HIGHEST


def einsum(subscripts: str, *operands: jax.Array, **kwargs) -> jax.Array:
  """`jnp.einsum` at `PRECISION` (its gradients too: autodiff keeps the precision)."""
  return jnp.einsum(subscripts, *operands, precision=PRECISION, **kwargs)


def dot(x: jax.Array, w: jax.Array, compute_dtype=jnp.float32) -> jax.Array:
  """`x @ w` (x [..., D], w [D, N]) with inputs cast to `compute_dtype`, float32 accumulation
  and result, in both passes: the backward matmuls dx = g w^T and dw = x^T g (summed over x's
  leading axes) take `compute_dtype` inputs too (docs/models.md, "Compute dtype").
  """
  return _dot(x, w, compute_dtype, "dn")


def dot_transposed(x: jax.Array, w: jax.Array, compute_dtype=jnp.float32) -> jax.Array:
  """`x @ w^T` for w [N, D], as `dot` but contracting w's last axis: no transposed copy of w
  (for the tied output layer h E^T, whose E [V, H] a copy would move at every decoding step)."""
  return _dot(x, w, compute_dtype, "nd")


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _dot(x, w, compute_dtype, w_axes: str):
  return einsum(f"...d,{w_axes}->...n", x.astype(compute_dtype), w.astype(compute_dtype),
                preferred_element_type=jnp.float32)


def _dot_fwd(x, w, compute_dtype, w_axes):
  return _dot(x, w, compute_dtype, w_axes), (x, w)


def _dot_bwd(compute_dtype, w_axes, residuals, g):
  x, w = residuals
  rows = lambda a: a.reshape(-1, a.shape[-1]).astype(compute_dtype)      # [..., K] -> [M, K]
  dx = einsum(f"...n,{w_axes}->...d", g.astype(compute_dtype), w.astype(compute_dtype),
              preferred_element_type=jnp.float32)
  dw = einsum(f"md,mn->{w_axes}", rows(x), rows(g), preferred_element_type=jnp.float32)
  return dx.astype(x.dtype), dw.astype(w.dtype)


_dot.defvjp(_dot_fwd, _dot_bwd)


def masked_softmax(scores: jax.Array, mask: jax.Array) -> jax.Array:
  """Softmax over the last axis restricted to `mask`; all-masked rows give all-zero weights.

  a_i = exp(e_i) / sum_{j valid} exp(e_j) for valid i, and 0 for masked i.
  """
  scores = jnp.where(mask, scores, MASKED_SCORE)
  scores = scores - jax.lax.stop_gradient(jnp.max(scores, axis=-1, keepdims=True))
  weights = jnp.exp(scores) * mask
  return weights / jnp.maximum(jnp.sum(weights, axis=-1, keepdims=True), 1e-30)


def masked_mean_weights(mask: jax.Array) -> jax.Array:
  """Uniform weights over the valid slots: a_i = 1 / (number of valid slots), 0 if masked."""
  mask = mask.astype(jnp.float32)
  return mask / jnp.maximum(jnp.sum(mask, axis=-1, keepdims=True), 1.0)


# The unsigned integer type of 1, 2 and 4 bytes (`dropout_mask`).
UNSIGNED_OF_BYTES = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32}


def dropout_bytes(rate: float) -> int:
  """The fewest random bytes per element (1 or 2) whose values split exactly at `rate`
  (rate * 256**bytes is a whole number: 1 byte for the papers' 0.5), else 4 (to 2**-32)."""
  return next((n for n in (1, 2) if (rate * 256 ** n).is_integer()), 4)


def dropout_mask(rng: jax.Array, rate: float, shape: Sequence[int]) -> jax.Array:
  """Inverted-dropout multiplier (Srivastava et al. 2014): 0 with probability `rate`, else
  1 / (1 - rate).

  An element keeps when its random unsigned integer of `dropout_bytes(rate)` bytes is at
  least rate * 256**bytes (why: benchmarks/README.md, "Dropout masks").
  """
  size, width = math.prod(shape), dropout_bytes(rate)
  words = jax.random.bits(rng, (-(-size * width // 4),), jnp.uint32)
  values = jax.lax.bitcast_convert_type(words, UNSIGNED_OF_BYTES[width]).reshape(-1)
  keep = values[:size].reshape(shape) >= round(rate * 256 ** width)
  return keep.astype(jnp.float32) / (1.0 - rate)


def uniform_init(rng: jax.Array, shape: Sequence[int], scale: float) -> jax.Array:
  """U(-scale, scale), the papers' initialisation (scale 0.05)."""
  return jax.random.uniform(rng, shape, jnp.float32, -scale, scale)


def xavier_init(rng: jax.Array, shape: Sequence[int]) -> jax.Array:
  """Glorot/Xavier uniform: U(-a, a), a = sqrt(6 / (fan_in + fan_out)); a vector is (1, n)."""
  fan_in, fan_out = (1, shape[0]) if len(shape) == 1 else (shape[0], shape[-1])
  limit = (6.0 / (fan_in + fan_out)) ** 0.5
  return jax.random.uniform(rng, shape, jnp.float32, -limit, limit)
