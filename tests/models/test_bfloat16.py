"""bfloat16 compute: its matmuls in both passes, and the demo model's loss after a few SGD
steps against float32."""

import runpy

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from attnlm_jax import data as data_lib
from attnlm_jax import models
from attnlm_jax.models import nn
import tiny_config

# Early steps: at the papers' learning rate 1.0 (the steps below), later steps go through
# loss spikes whose timing is chaotic (any rounding difference moves them), so both runs would
# no longer be comparable step for step.
NUM_STEPS = 10


def demo_config():
  """configs/demo.py (embedded corpus, 1 x 64 `single` model) with batches of 32 sentences
  drawn at random (not bucketed: the first batches are then typical of the corpus)."""
  config = runpy.run_path(str(tiny_config.REPO / "configs" / "demo.py"))["get_config"]()
  config.data.batch_size = 32
  config.data.bucket = False
  return config


def loss_fn(params, model_config, batch, rng):
  """Summed token NLL over the batch size (the papers' loss)."""
  logits = models.apply(params, model_config, batch["inputs"], batch["lengths"],
                        train=rng is not None, rng=rng)
  nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), batch["targets"][..., None], -1)
  mask = jnp.arange(batch["inputs"].shape[1])[None] < batch["lengths"][:, None]
  return jnp.sum(nll[..., 0] * mask) / batch["inputs"].shape[0]


def trained_loss(compute_dtype: str, batches: list, held_out: dict, vocab_size: int) -> float:
  """Held-out loss per sentence after SGD (lr 1, clip 5) on `batches` from one init."""
  config = demo_config().model
  config.update(vocab_size=vocab_size, compute_dtype=compute_dtype)
  params = models.init(jax.random.key(0), config)
  optimizer = optax.chain(optax.clip_by_global_norm(5.0), optax.sgd(1.0))

  @jax.jit
  def step(params, opt_state, batch, rng):
    grads = jax.grad(loss_fn)(params, config, batch, rng)
    updates, opt_state = optimizer.update(grads, opt_state)
    return optax.apply_updates(params, updates), opt_state

  opt_state = optimizer.init(params)
  for i, batch in enumerate(batches):
    params, opt_state = step(params, opt_state, batch, jax.random.key(i))
  return float(jax.jit(lambda p, b: loss_fn(p, config, b, None))(params, held_out))


def test_bfloat16_loss_after_training_is_within_one_percent_of_float32():
  config = demo_config()
  data = data_lib.load(config.data)
  iterator = data.train_iterator(epoch=0)
  batches = [jax.tree.map(jnp.asarray, next(iterator)) for _ in range(NUM_STEPS)]
  held_out = jax.tree.map(jnp.asarray, next(data.eval_batches("valid", 256)))
  full, half = (trained_loss(dtype, batches, held_out, len(data.vocab))
                for dtype in ("float32", "bfloat16"))
  untrained = np.log(len(data.vocab)) * float(jnp.mean(held_out["lengths"]))
  assert full < 0.95 * untrained                       # the steps did train
  assert full != half                                  # bfloat16 did change the arithmetic
  assert abs(half - full) <= 0.01 * full


# nn.dot with w [D, N], and nn.dot_transposed with the same weights stored as w^T [N, D].
LAYOUTS = {"dot": (nn.dot, lambda w: w), "dot_transposed": (nn.dot_transposed, np.transpose)}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_bfloat16_dot_runs_both_backward_matmuls_on_bfloat16_inputs(layout):
  dot, stored = LAYOUTS[layout]
  rng = np.random.default_rng(0)
  x, w, g = (rng.standard_normal(shape).astype(np.float32) for shape in ((2, 3, 5), (5, 4),
                                                                           (2, 3, 4)))
  rounded = lambda a: np.asarray(jnp.asarray(a, jnp.bfloat16), np.float64)
  value, pullback = jax.vjp(lambda x, w: dot(x, w, jnp.bfloat16), x, stored(w))
  dx, dw = pullback(jnp.asarray(g))
  np.testing.assert_allclose(value, rounded(x) @ rounded(w), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(dx, rounded(g) @ rounded(w).T, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(dw, stored(np.einsum("bsd,bsn->dn", rounded(x), rounded(g))),
                             rtol=1e-5, atol=1e-6)
  assert not np.allclose(dw, stored(np.einsum("bsd,bsn->dn", x, g)), rtol=1e-4, atol=0)
  dx32, dw32 = jax.vjp(lambda x, w: dot(x, w), x, stored(w))[1](jnp.asarray(g))
  np.testing.assert_allclose(dx32, g @ w.T, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(dw32, stored(np.einsum("bsd,bsn->dn", x, g)), rtol=1e-5,
                             atol=1e-6)
