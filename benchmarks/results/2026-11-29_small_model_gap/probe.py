"""Where does the 2 x 200 example recipe lose to pytorch/examples (benchmarks.processes,
`example_recipe`: 0.74x) when the 2 x 650 stream model does not (0.97x)? At 2 x 200 the tied
softmax is most of a step's FLOPs: [700, 200] x [200, 10000] forward, two such products
backward. This times that part alone on each side, forward and backward of the summed
cross-entropy, float32, after a warm-up, alternating (median of 20 calls per round, 3 rounds),
at the recipe's shape (batch 20 x 35 tokens, 200 features) and the 650 model's (32 x 35, 650).

From the repository root:
  PYTHONPATH=. python benchmarks/results/2026-11-29_small_model_gap/probe.py > \
    benchmarks/results/2026-11-29_small_model_gap/probe.jsonl
One JSON line per shape: each side's median milliseconds and GFLOP/s of the three products.
"""

import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch

from attnlm_jax.common import provenance

VOCAB = 10_000
SHAPES = {"example_recipe": (20 * 35, 200), "stream_650": (32 * 35, 650)}
CALLS, ROUNDS = 20, 3


def jax_loss_grad(tokens: int, features: int):
  """jit(grad) of the summed cross-entropy of h @ E^T w.r.t. h and E (the tied softmax)."""
  def loss(h, embed, targets):
    logits = jnp.dot(h, embed.T, precision=jax.lax.Precision.HIGHEST)
    logp = jax.nn.log_softmax(logits)
    return -jnp.take_along_axis(logp, targets[:, None], axis=1).sum()
  rng = np.random.default_rng(0)
  args = (jnp.asarray(rng.normal(size=(tokens, features)), jnp.float32),
          jnp.asarray(rng.uniform(-0.1, 0.1, (VOCAB, features)), jnp.float32),
          jnp.asarray(rng.integers(0, VOCAB, tokens), jnp.int32))
  grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
  return lambda: jax.block_until_ready(grad(*args))


def torch_loss_grad(tokens: int, features: int):
  """The same in PyTorch: F.linear, F.cross_entropy(reduction="sum"), backward."""
  rng = np.random.default_rng(0)
  h = torch.tensor(rng.normal(size=(tokens, features)), dtype=torch.float32, requires_grad=True)
  embed = torch.tensor(rng.uniform(-0.1, 0.1, (VOCAB, features)), dtype=torch.float32,
                       requires_grad=True)
  targets = torch.tensor(rng.integers(0, VOCAB, tokens))

  def call():
    h.grad = embed.grad = None
    torch.nn.functional.cross_entropy(torch.nn.functional.linear(h, embed), targets,
                                      reduction="sum").backward()
  return call


def median_ms(call) -> float:
  seconds = []
  for _ in range(CALLS):
    start = time.perf_counter()
    call()
    seconds.append(time.perf_counter() - start)
  return 1e3 * statistics.median(seconds)


def main():
  for name, (tokens, features) in SHAPES.items():
    sides = {"jax": jax_loss_grad(tokens, features), "torch": torch_loss_grad(tokens, features)}
    for call in sides.values():
      call()
    times = {side: [] for side in sides}
    for _ in range(ROUNDS):
      for side, call in sides.items():
        times[side].append(median_ms(call))
    flops = 3 * 2 * tokens * features * VOCAB
    ms = {side: statistics.median(t) for side, t in times.items()}
    print(json.dumps({"shape": name, "tokens": tokens, "features": features, "vocab": VOCAB,
                      "ms": {s: round(m, 2) for s, m in ms.items()},
                      "gflops": {s: round(flops / m / 1e6, 1) for s, m in ms.items()},
                      "ratio_jax_over_torch_speed": round(ms["torch"] / ms["jax"], 3),
                      "rounds_ms": {s: [round(x, 2) for x in t] for s, t in times.items()},
                      "cpu": provenance.cpu_model(), "threads": torch.get_num_threads(),
                      "versions": {"jax": jax.__version__, "torch": torch.__version__}}),
          flush=True)


if __name__ == "__main__":
  main()
