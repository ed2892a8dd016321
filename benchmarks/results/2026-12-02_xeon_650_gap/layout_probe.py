"""Would a feature-major recurrence close the 2 x 650 LSTM stack's gap to nn.LSTM on the Xeon?

XLA's CPU matmul runs the recurrent product faster as W_h^T [4H, H] x h^T [H, B] than as
h [B, H] x W_h [H, 4H]. This times, on one layer of the 2 x 650 model at batch 32 x 35 steps
(float32), alternating over rounds (median of 15 calls each):
- `chain`: 35 dependent recurrent products with a tanh between, in each layout;
- `layer`: the whole recurrence, forward and backward (`jax.grad`), as
  `attnlm_jax.models.lstm.scan_layer` computes it (batch-major) and as the same written-out
  backward pass with the state carried transposed (feature-major), transposes included.

From the repository root:
  PYTHONPATH=. python benchmarks/results/2026-12-02_xeon_650_gap/layout_probe.py > \
    benchmarks/results/2026-12-02_xeon_650_gap/layout_probe.jsonl
"""

import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from attnlm_jax.common import provenance
from attnlm_jax.models import lstm

T, B, H = 35, 32, 650
CALLS, ROUNDS = 15, 3


def _update(z, c_prev):
  """lstm._update with the gates along axis 0 ([4H, B])."""
  z_i, z_f, z_g, z_o = jnp.split(z, 4, axis=0)
  i, f, g, o = jax.nn.sigmoid(z_i), jax.nn.sigmoid(z_f), jnp.tanh(z_g), jax.nn.sigmoid(z_o)
  c = f * c_prev + i * g
  return (o * jnp.tanh(c), c), jnp.concatenate([i, f, g, o], axis=0)


@jax.custom_vjp
def feature_major(w_h, gates_x):
  return _fm_fwd(w_h, gates_x)[0]


def _fm_fwd(w_h, gates_x):
  w_t = w_h.T

  def step(carry, gx):
    new, act = _update(gx + w_t @ carry[0], carry[1])
    return new, (new[0], new[1], act)

  zeros = jnp.zeros((H, B), jnp.float32)
  _, (hs, cs, acts) = jax.lax.scan(step, (zeros, zeros), jnp.transpose(gates_x, (0, 2, 1)))
  return jnp.transpose(hs, (0, 2, 1)), (w_h, hs, cs, acts)


def _fm_bwd(residuals, d_hs):
  w_h, hs, cs, acts = residuals
  zeros = jnp.zeros((1, H, B), jnp.float32)
  c_prev = jnp.concatenate([zeros, cs[:-1]])

  def step(carry, xs):
    d_out, c_before, c, act = xs
    i, f, g, o = jnp.split(act, 4, axis=0)
    dh = carry[0] + d_out
    tanh_c = jnp.tanh(c)
    dc = carry[1] + dh * o * (1.0 - tanh_c * tanh_c)
    dz = jnp.concatenate([dc * g * i * (1.0 - i), dc * c_before * f * (1.0 - f),
                          dc * i * (1.0 - g * g), dh * tanh_c * o * (1.0 - o)], axis=0)
    return (w_h @ dz, dc * f), dz

  _, dz = jax.lax.scan(step, (zeros[0], zeros[0]),
                       (jnp.transpose(d_hs, (0, 2, 1)), c_prev, cs, acts), reverse=True)
  h_prev = jnp.concatenate([zeros, hs[:-1]])
  return jnp.einsum("thb,tgb->hg", h_prev, dz), jnp.transpose(dz, (0, 2, 1))


feature_major.defvjp(_fm_fwd, _fm_bwd)


def batch_major(w_h, gates_x):
  return lstm.scan_layer({"w_h": w_h}, gates_x, lstm.zero_state(B, H))[1]


def chain(product, h0, xs):
  def step(h, x):
    z = x + product(h)
    return jnp.tanh(z[:, :H] if h.shape[0] == B else z[:H]), None
  return jax.lax.scan(step, h0, xs)[0]


def median_ms(fn, args) -> float:
  jax.block_until_ready(fn(*args))
  seconds = []
  for _ in range(CALLS):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    seconds.append(time.perf_counter() - start)
  return statistics.median(seconds) * 1e3


def main():
  rng = np.random.default_rng(0)
  w_h = jnp.asarray(rng.uniform(-0.05, 0.05, (H, 4 * H)), jnp.float32)
  w_t = jnp.asarray(np.ascontiguousarray(np.asarray(w_h).T))
  gates_x = jnp.asarray(rng.standard_normal((T, B, 4 * H)), jnp.float32)
  gates_t = jnp.asarray(np.ascontiguousarray(np.transpose(np.asarray(gates_x), (0, 2, 1))))
  loss = lambda layer: lambda w, g: jnp.sum(layer(w, g) ** 2)
  grad = lambda layer: jax.jit(jax.grad(loss(layer), argnums=(0, 1)))
  want, got = grad(batch_major)(w_h, gates_x), grad(feature_major)(w_h, gates_x)
  agree = max(float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(a))) for a, b in zip(want, got))
  timed = {
      "chain_batch_major": (jax.jit(lambda w, x: chain(lambda h: h @ w, jnp.zeros((B, H)), x)),
                            (w_h, gates_x)),
      "chain_feature_major": (jax.jit(lambda w, x: chain(lambda h: w @ h, jnp.zeros((H, B)),
                                                         x)), (w_t, gates_t)),
      "layer_batch_major": (grad(batch_major), (w_h, gates_x)),
      "layer_feature_major": (grad(feature_major), (w_h, gates_x)),
  }
  rounds = {name: [] for name in timed}
  for _ in range(ROUNDS):
    for name, (fn, args) in timed.items():
      rounds[name].append(round(median_ms(fn, args), 2))
  print(json.dumps({
      "shape": {"steps": T, "batch": B, "hidden": H},
      "ms": {name: statistics.median(r) for name, r in rounds.items()}, "rounds_ms": rounds,
      "gradients_max_relative_difference": agree, "cpu": provenance.cpu_model(),
      "threads": provenance.host_cpus(),
      "versions": {"jax": jax.__version__}}))


if __name__ == "__main__":
  main()
