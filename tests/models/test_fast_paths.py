"""The fast paths against the reference forms: streaming memory, cached keys, query blocks,
the LSTM's written-out backward pass."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlm_jax import models
from attnlm_jax.models import lstm
from attnlm_jax.models import memory as memory_lib
from attnlm_jax.models import scores

# (score, zero_slot): without the zero slot the first step sees no slot at all (context 0),
# the same code path for both scores.
STREAMING = (("single", True), ("single", False), ("average", True))
KEYED = ("single", "combined", "conv1x1")
NUM_STEPS = 19          # longer than the training memory (max_len 6)


def tiny_config(score, **overrides):
  config = models.default_config()
  config.update({**dict(vocab_size=23, hidden_size=8, num_layers=1, max_len=6, score=score,
                        dropout=0.3), **overrides})
  return config


def random_params(config, seed=1):
  """Every leaf random and not small, so no term of an equation hides at 0."""
  params = models.init(jax.random.key(seed), config)
  leaves, treedef = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed + 100), len(leaves))
  params = jax.tree.unflatten(treedef, [leaf + 0.5 * jax.random.normal(k, leaf.shape)
                                        for k, leaf in zip(keys, leaves)])
  if models.STATS in params:
    params[models.STATS]["var"] = jnp.abs(params[models.STATS]["var"]) + 0.5
  return params


def random_batch(seed=0, num_steps=NUM_STEPS):
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, 23, (3, num_steps)).astype(np.int32)
  return jnp.asarray(tokens), jnp.asarray([num_steps, num_steps - 5, 2], jnp.int32)


def real(lengths, num_steps):
  return np.arange(num_steps)[None, :] < np.asarray(lengths)[:, None]


def stepped_log_probs(params, config, tokens, capacity=None):
  """Log-probs from `models.step`, one token at a time (one jitted scan)."""
  def body(state, token):
    logits, state = models.step(params, config, state, token)
    return state, jax.nn.log_softmax(logits)
  state = models.init_state(params, config, tokens.shape[0], capacity)
  final, log_probs = jax.jit(lambda s, t: jax.lax.scan(body, s, t))(state, tokens.T)
  return jnp.swapaxes(log_probs, 0, 1), final


# --------------------------------------------------------------------------- streaming


@pytest.mark.parametrize("name,zero_slot", STREAMING)
def test_streaming_step_equals_the_buffer_scan_past_max_len(name, zero_slot):
  config = tiny_config(name, zero_slot=zero_slot, attention_form="scan")
  params = random_params(config)
  tokens, _ = random_batch()
  lengths = jnp.full((3,), NUM_STEPS, jnp.int32)
  reference = jax.nn.log_softmax(models.apply(params, config, tokens, lengths))
  stepped, state = stepped_log_probs(params, config, tokens)
  assert isinstance(state.memory, memory_lib.RunningMean)
  np.testing.assert_allclose(stepped, reference, atol=1e-5)


def test_streaming_state_does_not_grow_with_capacity():
  config = tiny_config("single")
  sizes = [sum(x.size for x in jax.tree.leaves(models.init_state(None, config, 2, capacity)))
           for capacity in (6, 600)]
  assert sizes[0] == sizes[1]
  buffer = models.init_state(random_params(tiny_config("combined")), tiny_config("combined"),
                             2, 600)
  assert buffer.memory.states.shape == (2, 600, 8)


def test_running_mean_is_the_softmax_mean_of_its_slots_by_hand():
  states = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]], np.float32)
  scores_ = np.array([0.3, -2.0, 40.0], np.float32)      # one score far above the others
  running = memory_lib.running_empty(1, 2, zero_slot=True)
  for state, score in zip(states, scores_):
    running = memory_lib.running_write(running, jnp.asarray(state[None]),
                                       jnp.asarray([score]), jnp.array([True]))
  e = np.concatenate([[0.0], scores_])                     # the zero slot: score 0, state 0
  a = np.exp(e - e.max()) / np.exp(e - e.max()).sum()
  want = a[1:] @ states
  np.testing.assert_allclose(memory_lib.running_read(running)[0], want, rtol=1e-6)
  skipped = memory_lib.running_write(running, jnp.ones((1, 2)), jnp.asarray([99.0]),
                                     jnp.array([False]))
  np.testing.assert_allclose(memory_lib.running_read(skipped), memory_lib.running_read(running))
  empty = memory_lib.running_empty(1, 2, zero_slot=False)
  np.testing.assert_array_equal(memory_lib.running_read(empty), 0.0)


@pytest.mark.parametrize("name,zero_slot", STREAMING)
def test_prefix_form_equals_the_buffer_form_with_gradients(name, zero_slot):
  buffer_config = tiny_config(name, zero_slot=zero_slot, streaming_min_len=10**6)
  prefix_config = tiny_config(name, zero_slot=zero_slot, streaming_min_len=1)
  params = random_params(buffer_config)
  tokens, lengths = random_batch()
  targets = jnp.roll(tokens, -1, axis=1)
  mask = real(lengths, NUM_STEPS)

  def loss(trainable, config):
    logits = models.apply({**params, **trainable}, config, tokens, lengths, train=True,
                          rng=jax.random.key(4))
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], -1)[..., 0]
    return jnp.sum(nll * mask), logits

  (grads_b, logits_b), (grads_p, logits_p) = [
      jax.jit(jax.grad(lambda p, c=c: loss(p, c), has_aux=True))(models.trainable(params))
      for c in (buffer_config, prefix_config)]
  np.testing.assert_allclose(np.asarray(logits_p)[mask], np.asarray(logits_b)[mask], atol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5), grads_p, grads_b)
  evaluation = [models.apply(params, c, tokens, lengths) for c in (buffer_config, prefix_config)]
  np.testing.assert_allclose(np.asarray(evaluation[1])[mask], np.asarray(evaluation[0])[mask],
                             atol=1e-5)


def numpy_prefix_means(scores_, states, valid):
  """c_t = sum_{i <= t, valid} softmax(e)_i h_i, each prefix's softmax computed on its own in
  float64 (0 where a prefix holds no valid slot)."""
  batch_size, num_slots, dim = states.shape
  contexts = np.zeros((batch_size, num_slots, dim))
  for b in range(batch_size):
    for t in range(num_slots):
      slots = [i for i in range(t + 1) if valid[b, i]]
      if slots:
        e = scores_[b, slots].astype(np.float64)
        a = np.exp(e - e.max()) / np.exp(e - e.max()).sum()
        contexts[b, t] = a @ states[b, slots]
  return contexts


def test_prefix_means_is_the_softmax_mean_of_each_prefix_by_hand():
  """`memory.prefix_means` (the prefix form of `single`/`average`) against a softmax over
  slots 0..t recomputed for every t: scores far apart (so a summary merged without rescaling
  to the running max is wrong), masked slots holding the largest score (ignored), and a row
  without the zero slot, whose step 0 sees no slot (context 0)."""
  rng = np.random.default_rng(5)
  states = rng.normal(size=(3, 7, 4)).astype(np.float32)
  scores_ = np.array([[0.0, 0.3, -2.0, 40.0, 1.5, -35.0, 3.0],
                      [0.0, 99.0, 2.0, -1.0, 25.0, 0.5, 99.0],
                      [0.0, -3.0, 12.0, 0.7, 0.2, -8.0, 1.0]], np.float32)
  valid = np.array([[True, True, True, True, True, True, True],        # every slot
                    [True, False, True, True, True, True, False],      # 99s masked
                    [False, True, False, True, True, True, True]])     # no zero slot
  got = np.asarray(memory_lib.prefix_means(jnp.asarray(scores_), jnp.asarray(states),
                                           jnp.asarray(valid)))
  want = numpy_prefix_means(scores_, states, valid)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(got[2, 0], 0.0)            # empty prefix at step 0
  np.testing.assert_allclose(got[2, 2], states[2, 1], rtol=1e-6)   # slot 2 masked: h_1 alone
  # With the masks `apply` builds (`slot_mask`), zero slot off: a padded row's context past
  # its length stops changing.
  lengths = jnp.array([7, 3, 5])
  mask = np.asarray(memory_lib.slot_mask(lengths, 7, zero_slot=False))
  got = np.asarray(memory_lib.prefix_means(jnp.asarray(scores_), jnp.asarray(states),
                                           jnp.asarray(mask)))
  np.testing.assert_allclose(got, numpy_prefix_means(scores_, states, mask), rtol=1e-5,
                             atol=1e-6)
  np.testing.assert_array_equal(got[:, 0], 0.0)


def test_return_attention_falls_back_to_the_buffer_form():
  """The prefix form keeps no [T, L] weights, so `return_attention` runs the buffer form even
  for a sequence past `streaming_min_len`: it returns the buffer form's weights (causal, rows
  summing to 1). What the prefix form itself computes: the two tests above it."""
  configs = [tiny_config("single", streaming_min_len=m) for m in (1, 10**6)]
  params = random_params(configs[1])
  tokens, lengths = random_batch()
  weights, buffer = [np.asarray(models.apply(params, c, tokens, lengths,
                                             return_attention=True)[1]) for c in configs]
  assert weights.shape == buffer.shape == (3, NUM_STEPS, NUM_STEPS)
  mask = real(lengths, NUM_STEPS)
  np.testing.assert_allclose(weights[mask], buffer[mask], atol=1e-6)
  np.testing.assert_allclose(weights[mask].sum(-1), 1.0, atol=1e-5)
  assert not np.any(np.triu(weights, k=1))          # step t attends to slots 0..t only


def test_prefix_form_memory_grows_linearly_with_the_span():
  """XLA's buffer estimate for one row of 1,024 and 2,048 tokens: the [T, L] weights of the
  buffer form (16 MiB at 2,048) grow with the square of the span, the prefix form's O(T H)
  linearly."""
  def temp_bytes(streaming_min_len, num_steps=2048):
    config = tiny_config("single", streaming_min_len=streaming_min_len, vocab_size=5)
    params = models.init(jax.random.key(0), config)
    run = jax.jit(lambda p, t, n: models.apply(p, config, t, n))
    tokens = jnp.ones((1, num_steps), jnp.int32)
    compiled = run.lower(params, tokens, jnp.array([num_steps])).compile()
    return compiled.memory_analysis().temp_size_in_bytes
  prefix, buffer = temp_bytes(1), temp_bytes(10**6)
  assert buffer > 2048 * 2048 * 4
  assert prefix < buffer / 8
  assert prefix / temp_bytes(1, 1024) == pytest.approx(2, rel=0.1)
  assert buffer / temp_bytes(10**6, 1024) == pytest.approx(4, rel=0.1)


# --------------------------------------------------------------------------- cached keys


@pytest.mark.parametrize("name", KEYED)
def test_score_with_cached_keys_equals_score_computing_them(name):
  config = tiny_config(name)
  params = random_params(config)["score"]
  rng = np.random.default_rng(2)
  query = jnp.asarray(rng.normal(size=(2, 3, 8)), jnp.float32)
  memory = jnp.asarray(rng.normal(size=(2, 5, 8)), jnp.float32)
  mask = jnp.asarray(rng.random((2, 3, 5)) < 0.7)
  score = scores.SCORE_FUNCTIONS[name]
  plain = score.attend(params, query, memory, mask)
  cached = score.attend(params, query, memory, mask, keys=score.key(params, memory))
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), cached, plain)
  keys = score.key(params, memory)
  noise = jnp.asarray(rng.normal(size=keys.shape), jnp.float32)
  perturbed = score.attend(params, query, memory, mask, keys=keys + noise)
  assert not np.allclose(perturbed[1], plain[1])        # the cached keys are what is used


@pytest.mark.parametrize("name", ("combined", "conv1x1"))
def test_step_memory_holds_the_key_of_every_slot_and_matches_the_scan(name):
  config = tiny_config(name, attention_form="scan")
  params = random_params(config)
  tokens, _ = random_batch()
  lengths = jnp.full((3,), NUM_STEPS, jnp.int32)
  reference = jax.nn.log_softmax(models.apply(params, config, tokens, lengths))
  stepped, state = stepped_log_probs(params, config, tokens, capacity=NUM_STEPS + 1)
  np.testing.assert_allclose(stepped, reference, atol=1e-5)
  keys = scores.SCORE_FUNCTIONS[name].key(params["score"], state.memory.states)
  np.testing.assert_allclose(state.memory.keys, keys, atol=1e-6)


# --------------------------------------------------------------------------- query blocks


@pytest.mark.parametrize("name", ("combined", "conv1x1"))
def test_query_blocks_equal_one_block_with_gradients(name):
  whole = tiny_config(name)
  blocked = tiny_config(name, score_block_elements=3 * NUM_STEPS * 8 * 4)   # 4 queries/block
  params = random_params(whole)
  tokens, lengths = random_batch()
  mask = real(lengths, NUM_STEPS)

  def loss(trainable, config):
    logits, weights = models.apply({**params, **trainable}, config, tokens, lengths,
                                   return_attention=True)
    return jnp.sum(jax.nn.log_softmax(logits)[..., 0] * mask), (logits, weights)

  (grads_w, (logits_w, weights_w)), (grads_b, (logits_b, weights_b)) = [
      jax.jit(jax.grad(lambda p, c=c: loss(p, c), has_aux=True))(models.trainable(params))
      for c in (whole, blocked)]
  np.testing.assert_allclose(np.asarray(logits_b)[mask], np.asarray(logits_w)[mask], atol=1e-5)
  np.testing.assert_allclose(weights_b, weights_w, atol=1e-6)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5), grads_b, grads_w)


# --------------------------------------------------------------------------- LSTM backward


@pytest.mark.parametrize("unroll", (1, 3))
def test_lstm_backward_pass_equals_autodiff_of_the_cell_scan(unroll):
  steps, batch, hidden = 7, 3, 4
  rng = np.random.default_rng(2)
  normal = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)
  layer = lstm.init_layer(jax.random.key(0), 5, hidden, init_scale=0.8, forget_bias=0.5)
  gates_x, start = normal(steps, batch, 4 * hidden), lstm.LSTMState(normal(batch, hidden),
                                                                     normal(batch, hidden))
  probes = (normal(steps, batch, hidden), normal(batch, hidden), normal(batch, hidden))

  def cell_scan(layer, gates_x, state):          # the reference: autodiff through `cell`
    def step(carry, gx):
      carry = lstm.cell(layer, gx, carry)
      return carry, carry.h
    return jax.lax.scan(step, state, gates_x)

  def loss(run, w_h, gates_x, state):            # every output and the final state count
    final, hs = run({**layer, "w_h": w_h}, gates_x, state)
    return jnp.sum(hs * probes[0]) + jnp.sum(final.h * probes[1]) + jnp.sum(final.c * probes[2])

  written = lambda *a: lstm.scan_layer(*a, unroll=unroll)
  value, grads = jax.jit(jax.value_and_grad(lambda *a: loss(written, *a), argnums=(0, 1, 2)))(
      layer["w_h"], gates_x, start)
  ref_value, ref_grads = jax.value_and_grad(lambda *a: loss(cell_scan, *a), argnums=(0, 1, 2))(
      layer["w_h"], gates_x, start)
  np.testing.assert_allclose(value, ref_value, rtol=1e-6)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5), grads, ref_grads)


def test_step_reads_the_tied_embedding_in_place():
  # A transposed copy of E [V, H] in `step` would move the whole vocabulary's embeddings at
  # every decoded token (about 5 ms at V = 10,000, H = 650: several times the step itself).
  config = tiny_config("single", vocab_size=23, hidden_size=8)
  params = random_params(config)
  state = models.init_state(params, config, 1)
  compiled = jax.jit(lambda p, s, t: models.step(p, config, s, t)).lower(
      params, state, jnp.ones((1,), jnp.int32)).compile().as_text()
  assert "f32[23,8]" in compiled and "f32[8,23]" not in compiled
