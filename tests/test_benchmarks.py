"""The benchmarks' FLOP count agrees with XLA's own count of the same computation
(elementwise work makes XLA's count 1.5-3% higher here; leaving out the merge layer would
make ours ~10% lower)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlm_jax import losses
from attnlm_jax import models
from benchmarks import throughput


@pytest.mark.parametrize("score", ["none", "proj", "single", "combined", "average"])
@pytest.mark.parametrize("train_step", [False, True])
def test_useful_flops_matches_xla_cost_analysis(score, train_step):
  steps = 9
  config = models.default_config()
  config.update(vocab_size=300, hidden_size=96, num_layers=2, max_len=steps, score=score,
                dropout=0.0, unroll=steps)   # unrolled: XLA counts every time step
  params = models.init(jax.random.key(0), config)
  tokens = jnp.ones((4, steps), jnp.int32)
  lengths = jnp.full((4,), steps, jnp.int32)

  def loss(params):
    return losses.loss(models.apply(params, config, tokens, lengths), tokens, lengths)

  fn = jax.grad(loss) if train_step else loss
  xla = jax.jit(fn).lower(params).cost_analysis()["flops"]
  ours = throughput.useful_flops(config, np.asarray(lengths), train_step)
  assert ours == pytest.approx(xla, rel=0.04)
