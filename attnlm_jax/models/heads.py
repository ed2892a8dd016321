"""Output layers: the features h'_t that the tied softmax reads (logits = h'_t E^T + b).

- identity (baseline): h'_t = h_t.
- tanh (the `proj` control): h'_t = tanh(W_h h_t + b_c), i.e. tanh(W_c [h_t; 0] + b_c).
- merge (Salton et al. 2017 eq. 7; Salton & Kelleher 2018 eq. 11):
  h'_t = tanh(W_c [h_t; c_t] + b_c), written as tanh(W_h h_t + W_c c_t + b_c).
- residual_bn (the convolutional-attention LM): h'_t = h_t + beta * fc(bn(c_t)), fc an H->H
  layer and beta a vector (both Xavier-initialised, as the paper recommends).

The batch norm's statistics, per step in training and per position at evaluation, and why
`conv1x1` trains on batches of random sentences: docs/models.md, "Score functions".
"""

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp

from attnlm_jax.models import nn

BN_MOMENTUM = 0.99
BN_EPSILON = 1e-5


def identity(params, h, context, **_):
  """h'_t = h_t."""
  del params, context
  return h, None


def tanh_layer(params, h, context, *, compute_dtype=jnp.float32, linear=False, **_):
  """h'_t = tanh(W_h h_t + b_c) (the context is not used); without the tanh if `linear`."""
  del context
  pre = nn.dot(h, params["w_h"], compute_dtype) + params["b"]
  return (pre if linear else jnp.tanh(pre)), None


def merge(params, h, context, *, compute_dtype=jnp.float32, linear=False, **_):
  """h'_t = tanh(W_h h_t + W_c c_t + b_c) = tanh(W [h_t; c_t] + b_c); without the tanh if
  `linear` (the released code of Salton et al. 2017: h'_t = W [h_t; c_t] + b_c)."""
  pre = (nn.dot(h, params["w_h"], compute_dtype) + nn.dot(context, params["w_c"], compute_dtype)
         + params["b"])
  return (pre if linear else jnp.tanh(pre)), None


def residual_bn(params, h, context, *, valid, stats, train, positions,
                compute_dtype=jnp.float32, **_):
  """h'_t = h_t + beta * fc(bn(c_t)); returns the updated running statistics in training."""
  normalized, new_stats = batch_norm(context, valid, stats, train, positions)
  normalized = normalized * params["bn_scale"] + params["bn_bias"]
  projected = nn.dot(normalized, params["fc_w"], compute_dtype) + params["fc_b"]
  return h + params["beta"] * projected, new_stats


def batch_norm(x: jax.Array, valid: jax.Array, stats: dict, train: bool,
               positions: jax.Array):
  """Normalises x [B, T, H] per feature; returns (x_hat, new running stats or None).

  x_hat = (x - mu) / sqrt(var + eps) (Ioffe & Szegedy 2015), with mu and var kept per
  sentence position, as recurrent batch normalization does (Cooijmans et al. 2017); a
  running statistic m moves towards each training batch's s as m <- m + (1 - 0.99) (s - m).
  positions [T]: the position in the sentence of each time step (0 for the first word).
  Training: mean and variance of each time step over the rows valid there (`valid` [B, T]);
  the running statistics of each position [P, H] move towards them. Evaluation: the running
  statistics of each step's position (the last, P - 1, for positions past it).
  """
  num_positions = stats["mean"].shape[0]
  at = jnp.minimum(positions, num_positions - 1)
  if not train:
    return (x - stats["mean"][at]) * jax.lax.rsqrt(stats["var"][at] + BN_EPSILON), None
  weight = valid.astype(jnp.float32)[..., None]                          # [B, T, 1]
  count = jnp.sum(weight, axis=0)                                        # [T, 1]
  mean = jnp.sum(weight * x, axis=0) / jnp.maximum(count, 1.0)           # [T, H]
  var = jnp.sum(weight * jnp.square(x - mean), axis=0) / jnp.maximum(count, 1.0)
  # Only the positions the steps reach move (steps past the last position leave it alone).
  moves = (count > 0) & (positions[:, None] < num_positions)             # [T, 1]
  step_towards = lambda old, new: old.at[at].add(
      jnp.where(moves, (1 - BN_MOMENTUM) * (new - old[at]), 0.0))
  new_stats = {"mean": step_towards(stats["mean"], mean), "var": step_towards(stats["var"], var)}
  new_stats = jax.tree.map(jax.lax.stop_gradient, new_stats)
  return (x - mean) * jax.lax.rsqrt(var + BN_EPSILON), new_stats


@dataclasses.dataclass(frozen=True)
class Head:
  """apply(params, h, context, *, valid, stats, train, positions, compute_dtype, linear) ->
  (h', new stats), positions [T] the sentence position of each step, linear: no tanh;
  params: name -> (shape, initialiser) as in `scores.Score`; has_stats: keeps running stats;
  has_tanh: ends in a tanh, which `linear` removes."""
  apply: Callable
  params: dict
  has_stats: bool = False
  has_tanh: bool = False


HEADS = {
    "identity": Head(identity, {}),
    "tanh": Head(tanh_layer, {"w_h": (("H", "H"), "uniform"), "b": (("H",), "zeros")},
                 has_tanh=True),
    "merge": Head(merge, {"w_h": (("H", "H"), "uniform"), "w_c": (("H", "H"), "uniform"),
                          "b": (("H",), "zeros")}, has_tanh=True),
    "residual_bn": Head(residual_bn, {
        "bn_scale": (("H",), "ones"), "bn_bias": (("H",), "zeros"),
        "fc_w": (("H", "H"), "xavier"), "fc_b": (("H",), "zeros"),
        "beta": (("H",), "xavier")}, has_stats=True),
}


def init_stats(num_positions: int, hidden_size: int) -> dict:
  """Initial running batch-norm statistics [num_positions, hidden_size]: mean 0, variance 1."""
  return {"mean": jnp.zeros((num_positions, hidden_size), jnp.float32),
          "var": jnp.ones((num_positions, hidden_size), jnp.float32)}
