"""Useful FLOPs of the models and this machine's matmul rates: the benchmarks' roofline."""

import time
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.shapes import MAX_LEN


def useful_flops(config, lengths: np.ndarray, train_step: bool) -> float:
  """Useful FLOPs of one batch with row `lengths` (real tokens only; padding is waste).

  A multiply-add counts 2, an elementwise add 1; nonlinearities, softmax normalisation and
  the SGD update are not counted. Per real token at position t (0-based; the memory holds
  t + 1 slots, the zero slot included), with H hidden units, N layers, V words:

    LSTM         N x 2 x (4H x 2H)          (input and recurrent gate matmuls)
    softmax      2 H V                      (tied output layer)
    merge head   2 x (2H x H) = 4H^2        (`proj`: 2H^2; `none`: 0)
    single       2H^2 + 2H                  (key and score of the token's own slot, once)
                 + 2H (t + 1)               (weighted sum c_t)
    combined     2H^2 + 2H^2                (key of its slot, query W_q h_t)
                 + 3H (t + 1) + 2H (t + 1)  (tanh(k + q) . v per slot, weighted sum)
    average      2H (t + 1)                 (the weighted sum with uniform weights)

  A training step is 3x the forward (the backward pass does two matmuls per forward one).
  """
  h, v = config.hidden_size, config.vocab_size
  per_token = (config.num_layers * 2 * 4 * h * 2 * h + 2 * h * v
               + {"none": 0, "proj": 2 * h * h}.get(config.score, 4 * h * h))
  per_slot = 0
  if config.score == "single":
    per_token += 2 * h * h + 2 * h
    per_slot = 2 * h
  elif config.score == "combined":
    per_token += 4 * h * h
    per_slot = 5 * h
  elif config.score == "average":
    per_slot = 2 * h
  n = lengths.astype(np.float64)
  forward = per_token * n.sum() + per_slot * (n * (n + 1) / 2).sum()
  return float(forward * (3 if train_step else 1))


def part_flops(config, batch: int, length: int) -> dict:
  """Useful training FLOPs of the parts `benchmarks.step_parts` times, for one [batch, length]
  batch (as `useful_flops` counts: 3x the forward): the whole step, the LSTM stack, its
  recurrent matmuls alone and the tied softmax."""
  h, tokens = config.hidden_size, batch * length
  lengths = np.full(batch, length)
  return {"whole": useful_flops(config, lengths, True),
          "lstm_layers": 3.0 * config.num_layers * 2 * 4 * h * 2 * h * tokens,
          "recurrence": 3.0 * config.num_layers * 2 * h * 4 * h * tokens,
          "softmax": 3.0 * 2 * h * config.vocab_size * tokens}


def timings(run: Callable[[], object], repeats: int) -> list[float]:
  """Seconds of `repeats` calls of `run` (which waits for its result), after one warm-up
  call."""
  run()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    run()
    times.append(time.perf_counter() - start)
  return times


def best_rate(flops: float, run: Callable[[], object], repeats: int) -> float:
  """`flops` / the best of `repeats` timings of `run` (`timings`)."""
  return flops / min(timings(run, repeats))


def gemm_flops(size: int = 2048, repeats: int = 5) -> dict:
  """Matmul FLOP/s on this machine (best of `repeats`): fp32 with numpy and with XLA, and
  XLA with bfloat16 inputs and float32 accumulation (as `compute_dtype=bfloat16` does)."""
  a = np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)
  best = lambda run: best_rate(2.0 * size ** 3, run, repeats)
  matmul = jax.jit(lambda x, y: jnp.matmul(x, y, preferred_element_type=jnp.float32))
  fp32, bf16 = jnp.asarray(a), jnp.asarray(a, jnp.bfloat16)
  return {"numpy_fp32": best(lambda: a @ a),
          "xla_fp32": best(lambda: matmul(fp32, fp32).block_until_ready()),
          "xla_bf16": best(lambda: matmul(bf16, bf16).block_until_ready())}


def recurrent_gemm_flops(batch_size: int, hidden_size: int, steps: int = MAX_LEN,
                         repeats: int = 5) -> dict:
  """FLOP/s of the LSTM's recurrent matmul h_{t-1} W_h ([B, H] x [H, 4H], fp32) as the
  recurrence runs it: `steps` dependent matmuls in a row (h <- tanh(h W_h)[:, :H]), with XLA
  in a `lax.scan` and with PyTorch in a loop. It is the one matmul that cannot be batched over
  time, and the difference between the two frameworks' small-matrix kernels shows here."""
  import torch  # pylint: disable=g-import-not-at-top  (optional extra)

  rng = np.random.default_rng(0)
  w = rng.uniform(-0.05, 0.05, (hidden_size, 4 * hidden_size)).astype(np.float32)
  h0 = rng.standard_normal((batch_size, hidden_size)).astype(np.float32)
  flops = 2.0 * batch_size * hidden_size * 4 * hidden_size * steps

  @jax.jit
  def xla_chain(h, w):
    return jax.lax.scan(lambda h, _: (jnp.tanh(h @ w)[:, :hidden_size], None), h, None,
                        length=steps)[0]

  def torch_chain(h, w):
    for _ in range(steps):
      h = torch.tanh(h @ w)[:, :hidden_size]
    return h

  xla_args = (jnp.asarray(h0), jnp.asarray(w))
  torch_args = (torch.from_numpy(h0), torch.from_numpy(w))
  with torch.no_grad():
    rates = {
        "xla": best_rate(flops, lambda: xla_chain(*xla_args).block_until_ready(), repeats),
        "torch": best_rate(flops, lambda: torch_chain(*torch_args).sum().item(), repeats)}
  return {**rates, "shape": [batch_size, hidden_size, 4 * hidden_size]}
