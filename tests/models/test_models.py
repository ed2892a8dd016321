"""The model library: equations against NumPy, the three computation paths, causality."""

import functools
import json

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from attnlm_jax.common.errors import ConfigError
from attnlm_jax import models
from attnlm_jax.models import heads
from attnlm_jax.models import lm
from attnlm_jax.models import memory as memory_lib
from attnlm_jax.models import nn
from attnlm_jax.models import scores
from attnlm_jax.training import steps

ALL_SCORES = tuple(models.SCORE_FUNCTIONS)       # including the scores feeding the recurrence
# The scores whose context feeds the output layer (their attention reads the h memory).
ATTENTIVE = tuple(n for n, s in models.SCORE_FUNCTIONS.items() if s.attend is not None)


def tiny_config(score, **overrides):
  config = models.default_config()
  config.update(vocab_size=23, hidden_size=8, num_layers=2, max_len=6, score=score,
                dropout=0.3, **overrides)
  return config


def random_batch(seed=0, batch_size=3, num_steps=6, vocab_size=23):
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, vocab_size, (batch_size, num_steps)).astype(np.int32)
  lengths = np.array([num_steps, num_steps - 2, 1][:batch_size], np.int32)
  return jnp.asarray(tokens), jnp.asarray(lengths)


@functools.lru_cache(maxsize=None)
def _compiled(config_json: str, kind: str):
  """One jitted function per (config, kind), reused across calls and tests."""
  config = ml_collections.ConfigDict(json.loads(config_json))
  if kind == "log_probs":
    return jax.jit(lambda p, t, n: jax.nn.log_softmax(models.apply(p, config, t, n), axis=-1))

  def body(params, state, token):
    logits, state = models.step(params, config, state, token)
    return state, jax.nn.log_softmax(logits)
  return jax.jit(lambda p, s, tokens: jax.lax.scan(functools.partial(body, p), s, tokens.T)[1])


def log_probs(params, config, tokens, lengths):
  return _compiled(config.to_json(), "log_probs")(params, tokens, lengths)


def stepped_log_probs(params, config, tokens):
  """Log-probs from `models.step`, one token at a time: [B, T, V]."""
  state = models.init_state(params, config, tokens.shape[0])
  return jnp.swapaxes(_compiled(config.to_json(), "step")(params, state, tokens), 0, 1)


def randomized_params(config, seed=1):
  """Params with every leaf random (biases and BN statistics too), so no term hides at 0."""
  params = models.init(jax.random.key(seed), config)
  leaves, treedef = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed + 100), len(leaves))
  noisy = [leaf + 0.3 * jax.random.normal(k, leaf.shape) for k, leaf in zip(keys, leaves)]
  params = jax.tree.unflatten(treedef, noisy)
  if models.STATS in params:
    params[models.STATS]["var"] = jnp.abs(params[models.STATS]["var"]) + 0.5
  return params


# --------------------------------------------------------------------------- equations


def numpy_softmax(scores, mask):
  scores = np.where(mask, scores, -np.inf)
  if not mask.any():
    return np.zeros_like(scores)
  e = np.exp(scores - scores[mask].max())
  return e / e.sum()


def numpy_attention(name, params, query, memory, mask):
  """The score equations written out slot by slot, one query at a time."""
  batch_size, num_steps, _ = query.shape
  num_slots = memory.shape[1]
  contexts = np.zeros_like(query)
  weights = np.zeros((batch_size, num_steps, num_slots))
  for b in range(batch_size):
    for t in range(num_steps):
      m = mask[b, t]
      if name == "average":
        a = m / max(m.sum(), 1)
      else:
        e = np.zeros(num_slots)
        for i in range(num_slots):
          pre = params["w_s"].T @ memory[b, i]
          if name in ("combined", "conv1x1"):
            pre = pre + params["w_q"].T @ query[b, t]
          e[i] = params["v"] @ np.tanh(pre)
        a = numpy_softmax(e, m)
      weights[b, t] = a
      if name == "conv1x1":
        slot_w = [0.0] + [params["slot_w"][min(i - 1, len(params["slot_w"]) - 1)]
                          for i in range(1, num_slots)]
        contexts[b, t] = sum(slot_w[i] * a[i] * memory[b, i] for i in range(num_slots))
        contexts[b, t] += params["slot_b"]
      else:
        contexts[b, t] = sum(a[i] * memory[b, i] for i in range(num_slots))
  return contexts, weights


@pytest.mark.parametrize("name", ATTENTIVE)
def test_score_function_matches_numpy_equation(name):
  rng = np.random.default_rng(3)
  hidden, num_slots = 5, 7
  params = {"w_s": rng.normal(size=(hidden, hidden)), "w_q": rng.normal(size=(hidden, hidden)),
            "v": rng.normal(size=hidden), "slot_w": rng.normal(size=4), "slot_b": rng.normal()}
  params = {k: np.float32(v) if np.ndim(v) == 0 else v.astype(np.float32)
            for k, v in params.items()}
  query = rng.normal(size=(2, 3, hidden)).astype(np.float32)
  memory = rng.normal(size=(2, num_slots, hidden)).astype(np.float32)
  mask = rng.random((2, 3, num_slots)) < 0.6
  mask[0, 0] = False                                   # a query with no visible slot
  context, weights = scores.SCORE_FUNCTIONS[name].attend(
      jax.tree.map(jnp.asarray, params), jnp.asarray(query), jnp.asarray(memory),
      jnp.asarray(mask))
  want_context, want_weights = numpy_attention(name, params, query, memory, mask)
  np.testing.assert_allclose(weights, want_weights, atol=1e-5)
  np.testing.assert_allclose(context, want_context, atol=1e-5)


def test_merge_and_residual_heads_match_numpy():
  rng = np.random.default_rng(4)
  h, c = rng.normal(size=(2, 3, 5)), rng.normal(size=(2, 3, 5))
  p = {k: rng.normal(size=s) for k, s in {"w_h": (5, 5), "w_c": (5, 5), "b": (5,),
                                           "bn_scale": (5,), "bn_bias": (5,), "fc_w": (5, 5),
                                           "fc_b": (5,), "beta": (5,)}.items()}
  p32 = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), p)
  merged, _ = heads.merge(p32, jnp.float32(h), jnp.float32(c))
  np.testing.assert_allclose(merged, np.tanh(np.concatenate([h, c], -1)
                                             @ np.concatenate([p["w_h"], p["w_c"]]) + p["b"]),
                             atol=1e-5)
  stats = {"mean": rng.normal(size=(2, 5)), "var": rng.random((2, 5)) + 0.5}  # 2 positions
  valid = np.ones((2, 3), bool)
  out, new_stats = heads.residual_bn(p32, jnp.float32(h), jnp.float32(c), valid=valid,
                                     stats=jax.tree.map(jnp.float32, stats), train=False,
                                     positions=jnp.arange(3))
  at = [0, 1, 1]                     # Step 2 is past the last position: it uses the last.
  bn = (c - stats["mean"][at]) / np.sqrt(stats["var"][at] + heads.BN_EPSILON)
  want = h + p["beta"] * ((bn * p["bn_scale"] + p["bn_bias"]) @ p["fc_w"] + p["fc_b"])
  np.testing.assert_allclose(out, want, atol=1e-5)
  assert new_stats is None


def test_batch_norm_training_uses_each_steps_valid_rows():
  x = np.random.default_rng(5).normal(size=(4, 2, 3)).astype(np.float32)
  valid = np.array([[1, 1], [1, 1], [1, 0], [0, 0]], bool)
  stats = heads.init_stats(2, 3)
  out, _ = heads.batch_norm(jnp.asarray(x), jnp.asarray(valid), stats, True, jnp.arange(2))
  for t in range(2):
    rows = x[valid[:, t], t]
    want = (rows - rows.mean(0)) / np.sqrt(rows.var(0) + heads.BN_EPSILON)
    np.testing.assert_allclose(np.asarray(out)[valid[:, t], t], want, atol=1e-5)


def test_batch_norm_evaluation_with_each_positions_statistics_normalizes_as_training_did():
  """Running statistics are kept per position: each position's move towards its step's batch
  statistics, and once they hold them, evaluation normalises the batch exactly as training
  did (one set of statistics for every position could not: the steps' statistics differ)."""
  x = np.random.default_rng(8).normal(size=(5, 3, 4)).astype(np.float32)
  x *= np.array([0.1, 1.0, 3.0], np.float32)[None, :, None]      # Each step its own scale.
  valid = np.array([[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 0, 0]], bool)
  own = {"mean": np.stack([x[valid[:, t], t].mean(0) for t in range(3)]),
         "var": np.stack([x[valid[:, t], t].var(0) for t in range(3)])}
  start = heads.init_stats(3, 4)
  trained, moved = heads.batch_norm(jnp.asarray(x), jnp.asarray(valid), start, True,
                                    jnp.arange(3))
  for key in own:
    np.testing.assert_allclose(
        moved[key], heads.BN_MOMENTUM * start[key] + (1 - heads.BN_MOMENTUM) * own[key],
        atol=1e-6)
  evaluated, _ = heads.batch_norm(jnp.asarray(x), jnp.asarray(valid),
                                  jax.tree.map(jnp.asarray, own), False, jnp.arange(3))
  np.testing.assert_allclose(np.asarray(evaluated)[valid], np.asarray(trained)[valid],
                             atol=1e-5)


def test_average_context_is_mean_of_zero_slot_and_earlier_states():
  outputs = np.random.default_rng(6).normal(size=(2, 5, 4)).astype(np.float32)
  lengths = jnp.array([5, 3])
  mask = memory_lib.causal_mask(lengths, 5, zero_slot=True)
  context, _ = scores.average({}, jnp.asarray(outputs), memory_lib.shifted(outputs), mask)
  for b, length in enumerate([5, 3]):
    for t in range(length):
      slots = np.concatenate([np.zeros((1, 4)), outputs[b, :t]])   # [0, h_1 .. h_{t-1}]
      np.testing.assert_allclose(context[b, t], slots.mean(0), atol=1e-6)


@pytest.mark.parametrize("zero_slot", [True, False])
def test_buffer_written_step_by_step_equals_parallel_form(zero_slot):
  outputs = jnp.asarray(np.random.default_rng(7).normal(size=(2, 4, 3)), jnp.float32)
  lengths = jnp.array([4, 2])
  buffer = memory_lib.empty(2, 4, 3, zero_slot)
  mask = memory_lib.causal_mask(lengths, 4, zero_slot)
  for t in range(4):
    np.testing.assert_array_equal(buffer.mask, mask[:, t])           # read before write
    if t == 3:    # what the last step reads: [0, h_1, h_2, h_3]
      np.testing.assert_allclose(buffer.states, memory_lib.shifted(outputs))
    buffer = memory_lib.write(buffer, outputs[:, t], t < lengths)


def test_full_buffer_keeps_a_window_of_the_latest_states():
  buffer = memory_lib.empty(1, 3, 1, zero_slot=True)
  for value in range(1, 6):
    buffer = memory_lib.write(buffer, jnp.full((1, 1), float(value)), jnp.array([True]))
  assert sorted(np.asarray(buffer.states)[0, :, 0].tolist()) == [0.0, 4.0, 5.0]


@pytest.mark.parametrize("capacity", [3, 4])
def test_slot_positions_name_the_state_each_slot_holds(capacity):
  buffer = memory_lib.empty(1, capacity, 1, zero_slot=True)
  for position in range(1, 8):    # h_s = s, so a slot's state is its own sentence position
    buffer = memory_lib.write(buffer, jnp.full((1, 1), float(position)), jnp.array([True]))
    held = np.asarray(buffer.mask[0])
    np.testing.assert_array_equal(np.asarray(memory_lib.slot_positions(buffer))[held],
                                  np.asarray(buffer.states)[0, held, 0])


def test_step_weighs_a_wrapped_rings_states_by_their_sentence_positions():
  """Past its capacity `step` keeps a window, and conv1x1 weighs each kept state by its
  sentence position: reading the ring as it lies equals reading it oldest first with the
  positions of h_3, h_4, h_5 (slot index would give them w_1, w_2, w_3)."""
  config = tiny_config("conv1x1")
  params = randomized_params(config)
  tokens, _ = random_batch(num_steps=5)
  state = models.init_state(params, config, tokens.shape[0], capacity=4)
  for token in tokens.T:
    _, state = models.step(params, config, state, token)
  query = jax.random.normal(jax.random.key(3), (tokens.shape[0], config.hidden_size))
  context, _ = lm._read_memory(params, config, scores.get("conv1x1"), state.memory, query)
  ordered = memory_lib.chronological(state.memory)
  read = lambda positions: scores.conv1x1(params["score"], query[:, None], ordered.states,
                                          ordered.mask[:, None], keys=ordered.keys,
                                          positions=positions)[0][:, 0]
  np.testing.assert_allclose(context, read(jnp.array([0, 3, 4, 5])), atol=1e-6)
  assert not np.allclose(context, read(jnp.arange(4)), atol=1e-3)


# --------------------------------------------------------------------------- paths agree


@pytest.mark.parametrize("name", ALL_SCORES)
def test_parallel_scan_and_step_agree(name):
  config = tiny_config(name)
  params = randomized_params(config)
  tokens, lengths = random_batch()
  parallel = log_probs(params, config, tokens, lengths)
  scanned = log_probs(params, tiny_config(name, attention_form="scan"), tokens, lengths)
  stepped = stepped_log_probs(params, config, tokens)
  real = np.arange(tokens.shape[1])[None, :] < np.asarray(lengths)[:, None]
  np.testing.assert_allclose(np.asarray(scanned)[real], np.asarray(parallel)[real], atol=1e-5)
  np.testing.assert_allclose(np.asarray(stepped)[real], np.asarray(parallel)[real], atol=1e-5)


@pytest.mark.parametrize("name", ALL_SCORES)
def test_training_mode_forms_agree_with_the_same_dropout(name):
  config = tiny_config(name)
  params = randomized_params(config)
  tokens, lengths = random_batch()
  run = lambda c: models.apply(params, c, tokens, lengths, train=True, rng=jax.random.key(9),
                               mutable=True)
  scan_config = tiny_config(name, attention_form="scan")
  (parallel, updates_p), (scanned, updates_s) = run(config), run(scan_config)
  real = np.arange(tokens.shape[1])[None, :] < np.asarray(lengths)[:, None]
  np.testing.assert_allclose(np.asarray(scanned)[real], np.asarray(parallel)[real], atol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), updates_p, updates_s)


@pytest.mark.parametrize("name", ATTENTIVE)
def test_attention_rows_sum_to_one_over_valid_slots(name):
  config = tiny_config(name)
  tokens, lengths = random_batch()
  _, weights = models.apply(randomized_params(config), config, tokens, lengths,
                            return_attention=True)
  mask = memory_lib.causal_mask(lengths, tokens.shape[1], config.zero_slot)
  np.testing.assert_allclose(jnp.sum(weights * mask, -1)[:, :], 1.0, atol=1e-5)
  assert float(jnp.max(jnp.abs(weights * ~mask))) == 0.0


# --------------------------------------------------------------------------- causality


# The scores that feed the recurrence have only the scan form; the streaming scores (`single`,
# `average`) also have the prefix form, the parallel form of a sequence of
# `streaming_min_len` steps or more ("prefix": streaming_min_len 1).
FORMS_OF_EACH_SCORE = [(name, form) for name in ALL_SCORES for form in models.ATTENTION_FORMS
                       if form == "scan" or not scores.SCORE_FUNCTIONS[name].feeds_recurrence]
FORMS_OF_EACH_SCORE += [(name, "prefix") for name in ALL_SCORES
                        if scores.SCORE_FUNCTIONS[name].streaming]


@pytest.mark.parametrize("name, form", FORMS_OF_EACH_SCORE)
def test_later_tokens_never_change_earlier_log_probs(name, form):
  config = (tiny_config(name, attention_form="parallel", streaming_min_len=1)
            if form == "prefix" else tiny_config(name, attention_form=form))
  params = randomized_params(config)
  tokens, _ = random_batch(batch_size=2)
  lengths = jnp.array([6, 6])
  base = log_probs(params, config, tokens, lengths)
  for t in range(5):
    changed = tokens.at[:, t + 1:].set((tokens[:, t + 1:] + 7) % 23)
    moved = log_probs(params, config, changed, lengths)
    np.testing.assert_allclose(moved[:, :t + 1], base[:, :t + 1], atol=1e-6)
    assert not np.allclose(moved[:, t + 1:], base[:, t + 1:])      # the change is visible


@pytest.mark.parametrize("name", ALL_SCORES)
def test_sentence_alone_equals_sentence_in_padded_batch(name):
  config = tiny_config(name)
  params = randomized_params(config)
  tokens, _ = random_batch(batch_size=3, num_steps=9)
  alone = log_probs(params, config, tokens[:1, :4], jnp.array([4]))
  batch = log_probs(params, config, tokens.at[0, 4:].set(0), jnp.array([4, 9, 7]))
  np.testing.assert_allclose(batch[0, :4], alone[0], atol=1e-5)


@pytest.mark.parametrize("name", ALL_SCORES)
def test_training_rows_see_the_other_rows_of_their_batch_only_through_batch_statistics(name):
  """In training, a row's log-probs depend on the other rows' words or lengths only through
  the batch norm's statistics (`conv1x1`), which therefore trains on batches of random
  sentences (`run_config.check_training`)."""
  config = tiny_config(name)
  params = randomized_params(config)
  tokens, lengths = random_batch(batch_size=3)

  def trained_log_probs(tokens, lengths):
    logits, _ = models.apply(params, config, tokens, lengths, train=True,
                             rng=jax.random.key(3), mutable=True)
    return jax.nn.log_softmax(logits)[0]

  base = trained_log_probs(tokens, lengths)
  others = trained_log_probs(tokens.at[1:].set((tokens[1:] + 5) % 23), jnp.array([6, 2, 5]))
  if models.uses_batch_statistics(config):
    assert not np.allclose(others, base)
  else:
    np.testing.assert_allclose(others, base, atol=1e-6)


# --------------------------------------------------------------------------- training


@pytest.mark.parametrize("name", ALL_SCORES)
def test_one_sgd_step_changes_every_parameter(name):
  config = tiny_config(name)
  params = randomized_params(config)
  tokens, lengths = random_batch()
  targets = jnp.roll(tokens, -1, axis=1)

  def loss(trainable):
    logits = models.apply({**params, **trainable}, config, tokens, lengths, train=True,
                          rng=jax.random.key(1))
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], -1)[..., 0]
    return jnp.sum(nll * (jnp.arange(6)[None] < lengths[:, None])) / tokens.shape[0]

  trainable = models.trainable(params)
  grads = jax.grad(loss)(trainable)
  optimizer = steps.make_optimizer(ml_collections.ConfigDict(
      {"learning_rate": 1.0, "grad_clip": 5.0}))
  updates, _ = optimizer.update(grads, optimizer.init(trainable), trainable)
  updated = optax.apply_updates(trainable, updates)
  # The score's inert parameters, which the batch norm cancels, are tested on their own.
  inert = {f"['score']['{parameter}']" for parameter in scores.get(name).inert}
  moved = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), trainable, updated)
  keys = [(jax.tree_util.keystr(path), c) for path, c in jax.tree_util.tree_leaves_with_path(moved)]
  dead = [key for key, c in keys if not c and key not in inert]
  assert not dead, f"parameters the training step leaves unchanged: {dead}"


def test_conv1x1_context_bias_is_inert_in_training_and_acts_at_evaluation():
  """The batch norm over the batch cancels b of c_t = sum_i w_i a_i h_i + b in training (its
  gradient is 0 but for rounding); with the running statistics of evaluation b acts."""
  config = tiny_config("conv1x1")
  params = randomized_params(config)
  tokens, lengths = random_batch()
  targets = jnp.roll(tokens, -1, axis=1)

  def bias_gradient(**mode):
    def loss(bias):
      full = {**params, "score": {**params["score"], "slot_b": bias}}
      logits = models.apply(full, config, tokens, lengths, **mode)
      nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], -1)[..., 0]
      return jnp.sum(nll * (jnp.arange(6)[None] < lengths[:, None]))
    return abs(float(jax.grad(loss)(params["score"]["slot_b"])))

  assert scores.get("conv1x1").inert == ("slot_b",)
  training, evaluation = bias_gradient(train=True, rng=jax.random.key(1)), bias_gradient()
  assert evaluation > 0 and training < 1e-4 * evaluation


def test_conv1x1_batch_norm_statistics_move_in_training_mode_only():
  config = tiny_config("conv1x1")
  params = models.init(jax.random.key(0), config)
  tokens, lengths = random_batch()
  _, updates = models.apply(params, config, tokens, lengths, train=True, rng=jax.random.key(1),
                            mutable=True)
  assert not np.allclose(updates[models.STATS]["mean"], params[models.STATS]["mean"])
  assert not np.allclose(updates[models.STATS]["var"], params[models.STATS]["var"])
  _, updates = models.apply(params, config, tokens, lengths, mutable=True)
  assert updates == {}


def test_evaluation_is_deterministic_and_training_uses_dropout():
  config = tiny_config("single")
  params = models.init(jax.random.key(0), config)
  tokens, lengths = random_batch()
  first = models.apply(params, config, tokens, lengths)
  np.testing.assert_array_equal(first, models.apply(params, config, tokens, lengths))
  trained = models.apply(params, config, tokens, lengths, train=True, rng=jax.random.key(2))
  assert not np.allclose(trained, first)


@pytest.mark.parametrize("name, pos_tags", [("single", False), ("das_lstmn", True)])
def test_embedding_dropout_zeroes_the_gradient_of_each_dropped_input_coordinate(name, pos_tags):
  """The input m_t = [w_t; p_t] is dropped coordinate by coordinate with the mask of each row
  rebuilt here as `lm._dropout` draws it (the first of three keys split from
  fold_in(rng, row), `nn.dropout_mask` of [T, D]): with every token and tag used once and an
  untied softmax (so the embedding reaches the loss only as an input), the gradient of a used
  row's coordinate is exactly 0 where the mask drops it and nonzero where it keeps it. (DAS
  attends over the dropped inputs too.)"""
  batch_size, num_steps = 2, 5
  config = tiny_config(name, tie_embeddings=False, pos_tags=pos_tags,
                       num_tags=batch_size * num_steps, tag_size=3, init_scale=0.5)
  rate = config.dropout
  params = models.init(jax.random.key(1), config)
  draw = np.random.default_rng(4)
  tokens = draw.permutation(config.vocab_size)[:batch_size * num_steps].reshape(
      batch_size, num_steps).astype(np.int32)
  tags = draw.permutation(config.num_tags).reshape(batch_size, num_steps).astype(np.int32)
  lengths = jnp.full((batch_size,), num_steps)
  rng = jax.random.key(7)

  def loss(tables):
    logits = models.apply({**params, **tables}, config, jnp.asarray(tokens), lengths,
                          train=True, rng=rng, tags=jnp.asarray(tags) if pos_tags else None)
    return -jnp.sum(jax.nn.log_softmax(logits)[..., 0])

  tables = {"embed": params["embed"], **({"tag_embed": params["tag_embed"]} if pos_tags else {})}
  grads = jax.jit(jax.grad(loss))(tables)
  width = config.hidden_size + (config.tag_size if pos_tags else 0)
  masks = np.stack([nn.dropout_mask(jax.random.split(jax.random.fold_in(rng, row), 3)[0], rate,
                                    (num_steps, width)) for row in range(batch_size)])
  assert np.any(masks == 0) and np.any(masks > 0)
  got = np.asarray(grads["embed"])[tokens]                                  # [B, T, H]
  if pos_tags:
    got = np.concatenate([got, np.asarray(grads["tag_embed"])[tags]], axis=-1)
  np.testing.assert_array_equal(got[masks == 0], 0.0)
  assert np.all(got[masks > 0] != 0.0)
  unused = np.setdiff1d(np.arange(config.vocab_size), tokens)
  np.testing.assert_array_equal(np.asarray(grads["embed"])[unused], 0.0)


# --------------------------------------------------------------------------- config


def test_ptb_single_model_has_the_papers_parameter_count():
  config = models.default_config()
  config.update(vocab_size=10_003, score="single")
  shapes = jax.eval_shape(lambda: models.init(jax.random.key(0), config))
  assert abs(models.count_params(shapes) - 14.5e6) <= 0.1e6


def test_attention_of_a_model_without_attention_is_an_error():
  config = tiny_config("none")
  tokens, lengths = random_batch()
  with pytest.raises(ConfigError, match="no attention"):
    models.apply(models.init(jax.random.key(0), config), config, tokens, lengths,
                 return_attention=True)


@pytest.mark.parametrize("field, value", [("hidden_size", 0), ("max_len", 1), ("unroll", 0)])
def test_a_size_below_its_minimum_is_refused_in_one_line(field, value):
  config = tiny_config("single")
  config[field] = value
  with pytest.raises(ConfigError, match=f"config.model.{field} = {value} is too small"):
    models.init(jax.random.key(0), config)


def test_a_memory_of_fewer_than_two_slots_is_refused():
  config = tiny_config("combined")
  with pytest.raises(ConfigError, match="capacity = 1: the memory needs at least 2 slots"):
    models.init_state(models.init(jax.random.key(0), config), config, 1, capacity=1)


def test_bfloat16_compute_stays_close_to_float32():
  config = tiny_config("combined")
  params = randomized_params(config)   # not near 0, so bfloat16's rounding shows
  tokens, lengths = random_batch()
  full = log_probs(params, config, tokens, lengths)
  half = log_probs(params, tiny_config("combined", compute_dtype="bfloat16"), tokens, lengths)
  assert half.dtype == jnp.float32
  np.testing.assert_allclose(half, full, atol=2e-2)
  assert np.abs(np.asarray(half) - np.asarray(full)).max() > 1e-5   # bfloat16 was used
