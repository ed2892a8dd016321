"""The models whose context feeds the recurrence (DAS, LSTMN, DAS-LSTMN) against NumPy loops."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlm_jax.common.errors import ConfigError
from attnlm_jax import models
from attnlm_jax.models import recurrent
from attnlm_jax.models import scores

RECURRENT = scores.RECURRENT_SCORES
NUM_TAGS = 7


def tiny_config(score, **overrides):
  config = models.default_config()
  config.update({**dict(vocab_size=19, hidden_size=6, num_layers=1, max_len=7, score=score,
                        dropout=0.3, num_tags=NUM_TAGS, tag_size=4), **overrides})
  return config


def random_params(config, seed=1):
  """Every leaf random and not tiny, so no term of an equation hides at 0."""
  params = models.init(jax.random.key(seed), config)
  leaves, treedef = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed + 100), len(leaves))
  return jax.tree.unflatten(treedef, [leaf + 0.5 * jax.random.normal(k, leaf.shape)
                                      for k, leaf in zip(keys, leaves)])


def random_batch(seed=0, num_steps=7, vocab_size=19):
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, vocab_size, (3, num_steps)).astype(np.int32)
  tags = rng.integers(0, NUM_TAGS, (3, num_steps)).astype(np.int32)
  lengths = np.array([num_steps, num_steps - 3, 1], np.int32)
  return jnp.asarray(tokens), jnp.asarray(tags), jnp.asarray(lengths)


# --------------------------------------------------------------------------- NumPy reference


def sigmoid(x, xp=np):
  return 1.0 / (1.0 + xp.exp(-x))


def softmax(e, xp=np):
  e = xp.exp(e - e.max())
  return e / e.sum()


def lstm_cell(layer, x, h, c, xp=np):
  """z = x W_x + h W_h + b; gates (i, f, g, o); c' = f c + i g; h' = o tanh(c')."""
  z = x @ layer["w_x"] + h @ layer["w_h"] + layer["b"]
  i, f, g, o = xp.split(z, 4)
  c = sigmoid(f, xp) * c + sigmoid(i, xp) * xp.tanh(g)
  return sigmoid(o, xp) * xp.tanh(c), c


def numpy_model(params, config, tokens, tags, b_v=0.0, xp=np, tape_slots=0):
  """One sentence, written from Cao & Yu eqs. 1-8, 15-19 step by step, in NumPy (or, with
  xp=jax.numpy, differentiable), for `config.num_layers` stacked layers as docs/models.md has
  them: the DAS query is the last layer's h_{t-1} (the LSTM's output) and its context feeds
  the first layer; the LSTMN tapes hold the first layer's (h, c), and their read replaces the
  first layer's previous state only (the layers above keep their own recurrence).

  Returns the log-probabilities [T, V] and the attention weights of each step (DAS: over the
  word history w_1..w_t; LSTMN: over the tape [h_0 = 0, h_1 .. h_{t-1}]). b_v is the DAS
  score's output bias (eq. 6), which the softmax cancels. tape_slots > 0 keeps the LSTMN
  tapes to h_0 and the last tape_slots - 1 states.
  """
  p = jax.tree.map(xp.asarray, params)
  name = config.score
  hidden = config.hidden_size
  layers = p["lstm"]
  hs, cs = [xp.zeros(hidden)] * len(layers), [xp.zeros(hidden)] * len(layers)
  read_h = xp.zeros(hidden)
  history = {"words": [], "tags": []}                 # w_1..w_t and p_1..p_t
  tape_h, tape_c = [xp.zeros(hidden)], [xp.zeros(hidden)]
  log_probs, attention = [], []
  for t, token in enumerate(tokens):
    streams = {"words": p["embed"][token]}
    if config.pos_tags:
      streams["tags"] = p["tag_embed"][tags[t]]
    m = xp.concatenate(list(streams.values()))          # m_t = [w_t; p_t]
    x = m
    if "das" in name:
      contexts = []
      for stream, vector in streams.items():
        history[stream].append(vector)
        q = p["recurrent"]["das"][stream]
        e = xp.array([q["v"] @ xp.tanh(q["w_w"].T @ w_i + q["w_h"].T @ hs[-1] + q["b_att"])
                      + b_v for w_i in history[stream]])
        a = softmax(e, xp)
        contexts.append(sum(a_i * w_i for a_i, w_i in zip(a, history[stream])))
        if stream == "words":
          attention.append(a)
      x = xp.concatenate([m] + contexts)                  # [m_t; m'_t]
    h_prev, c_prev = hs[0], cs[0]
    if "lstmn" in name:                                   # eq. 1, x_t -> m_t (sec. 3.3)
      q = p["recurrent"]["lstmn"]
      e = xp.array([q["v"] @ xp.tanh(q["w_h"].T @ h_i + q["w_x"].T @ m + q["w_r"].T @ read_h)
                    for h_i in tape_h])
      a = softmax(e, xp)
      h_prev = sum(a_i * h_i for a_i, h_i in zip(a, tape_h))
      c_prev = sum(a_i * c_i for a_i, c_i in zip(a, tape_c))
      read_h = h_prev
      if name == "lstmn":
        attention.append(a)
    hs[0], cs[0] = lstm_cell(layers[0], x, h_prev, c_prev, xp)
    for depth in range(1, len(layers)):
      hs[depth], cs[depth] = lstm_cell(layers[depth], hs[depth - 1], hs[depth], cs[depth], xp)
    tape_h.append(hs[0])
    tape_c.append(cs[0])
    if tape_slots and len(tape_h) > tape_slots:           # forget the oldest state, keep h_0
      del tape_h[1], tape_c[1]
    logits = p["embed"] @ hs[-1] + p["out_bias"]
    log_probs.append(logits - logits.max() - xp.log(xp.exp(logits - logits.max()).sum()))
  return xp.stack(log_probs), attention


@pytest.mark.parametrize("pos_tags, num_layers", [(False, 1), (True, 1), (False, 2)])
@pytest.mark.parametrize("name", RECURRENT)
def test_model_matches_numpy_equations(name, pos_tags, num_layers):
  config = tiny_config(name, pos_tags=pos_tags, num_layers=num_layers)
  params = random_params(config)
  tokens, tags, lengths = random_batch()
  logits, weights = models.apply(params, config, tokens, lengths, tags=tags,
                                 return_attention=True)
  got = np.asarray(jax.nn.log_softmax(logits))
  for b, length in enumerate(np.asarray(lengths)):
    want, attention = numpy_model(params, config, np.asarray(tokens[b, :length]),
                                  np.asarray(tags[b, :length]), b_v=1.7)
    np.testing.assert_allclose(got[b, :length], want, atol=1e-5)
    for t, a in enumerate(attention):
      np.testing.assert_allclose(weights[b, t, :len(a)], a, atol=1e-5)
      assert not np.any(np.asarray(weights)[b, t, len(a):])


@pytest.mark.parametrize("name", ["lstmn", "das_lstmn"])
def test_a_shorter_tape_matches_the_equations(name):
  """tape_slots = 3: each step reads h_0 and the last two states (the DAS buffer keeps every
  input); past the third step the full tape's log-probabilities differ."""
  config = tiny_config(name, tape_slots=3)
  params = random_params(config)
  tokens, tags, lengths = random_batch()
  got = np.asarray(jax.nn.log_softmax(models.apply(params, config, tokens, lengths, tags=tags)))
  for b, length in enumerate(np.asarray(lengths)):
    sentence = np.asarray(tokens[b, :length]), np.asarray(tags[b, :length])
    want, _ = numpy_model(params, config, *sentence, tape_slots=3)
    np.testing.assert_allclose(got[b, :length], want, atol=1e-5)
    full, _ = numpy_model(params, config, *sentence)
    np.testing.assert_allclose(got[b, :min(length, 3)], full[:3], atol=1e-5)
    if length > 3:
      assert np.abs(got[b, 3:length] - full[3:]).max(axis=1).min() > 1e-4


@pytest.mark.parametrize("name, tape_slots, message", [
    ("lstmn", 1, "tape_slots = 1: a tape needs at least 2 slots"),
    ("lstmn", -2, "tape_slots = -2: a tape needs at least 2 slots"),
    ("das", 3, "tape_slots = 3 sizes the LSTMN's tapes, and score 'das' has none"),
    ("single", 3, "tape_slots = 3 sizes the LSTMN's tapes, and score 'single' has none")])
def test_a_bad_tape_is_refused_in_one_line(name, tape_slots, message):
  with pytest.raises(ConfigError, match=message):
    models.init(jax.random.key(0), tiny_config(name, tape_slots=tape_slots))


def test_a_short_tape_refuses_to_return_its_ring_as_attention():
  """Its slots are not the sentence's positions: `apply` refuses, and the analyses that draw
  attention over the sentence skip the model (the other analyses still run)."""
  config = tiny_config("lstmn", tape_slots=3)
  tokens, _, lengths = random_batch()
  with pytest.raises(ConfigError, match="tape_slots = 3 keeps the LSTMN's tape as a ring"):
    models.apply(random_params(config), config, tokens, lengths, return_attention=True)
  assert not models.has_sentence_attention(config)
  assert models.has_sentence_attention(tiny_config("lstmn"))
  assert models.has_sentence_attention(tiny_config("das_lstmn", tape_slots=3))  # the DAS weights
  assert not models.has_sentence_attention(tiny_config("none"))


def test_score_functions_match_their_equations():
  rng = np.random.default_rng(0)
  das = {"w_w": rng.normal(size=(4, 5)), "w_h": rng.normal(size=(3, 5)),
         "b_att": rng.normal(size=5), "v": rng.normal(size=5)}
  lstmn = {"w_h": rng.normal(size=(3, 3)), "w_x": rng.normal(size=(4, 3)),
           "w_r": rng.normal(size=(3, 3)), "v": rng.normal(size=3)}
  inputs, h_prev = rng.normal(size=(2, 6, 4)), rng.normal(size=(2, 3))
  tape, x, read = rng.normal(size=(2, 6, 3)), rng.normal(size=(2, 4)), rng.normal(size=(2, 3))
  as32 = lambda tree: jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), tree)
  keys = recurrent.das_key(as32(das), as32(inputs))
  got_das = recurrent.das_scores(as32(das), keys, as32(h_prev))
  keys = recurrent.lstmn_key(as32(lstmn), as32(tape))
  got_lstmn = recurrent.lstmn_scores(as32(lstmn), keys, *as32((x, read)))
  for b in range(2):
    for i in range(6):
      want = das["v"] @ np.tanh(das["w_w"].T @ inputs[b, i] + das["w_h"].T @ h_prev[b]
                                + das["b_att"])
      np.testing.assert_allclose(got_das[b, i], want, rtol=1e-5, atol=1e-5)
      want = lstmn["v"] @ np.tanh(lstmn["w_h"].T @ tape[b, i] + lstmn["w_x"].T @ x[b]
                                  + lstmn["w_r"].T @ read[b])
      np.testing.assert_allclose(got_lstmn[b, i], want, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- paths agree


@pytest.mark.parametrize("name", RECURRENT)
def test_apply_and_step_agree_with_tags_and_two_layers(name):
  """(test_models.py checks the same without tags for every score.)"""
  config = tiny_config(name, pos_tags=True, num_layers=2)
  params = random_params(config)
  tokens, tags, lengths = random_batch()
  applied = jax.nn.log_softmax(models.apply(params, config, tokens, lengths, tags=tags))
  state = models.init_state(params, config, tokens.shape[0])
  stepped = []
  for t in range(tokens.shape[1]):
    logits, state = models.step(params, config, state, tokens[:, t], tags[:, t])
    stepped.append(jax.nn.log_softmax(logits))
  real = np.arange(tokens.shape[1])[None, :] < np.asarray(lengths)[:, None]
  np.testing.assert_allclose(np.asarray(jnp.stack(stepped, 1))[real], np.asarray(applied)[real],
                             atol=1e-5)


@pytest.mark.parametrize("name", RECURRENT)
def test_parallel_setting_runs_the_scan_form(name):
  config = tiny_config(name)
  params = random_params(config)
  tokens, _, lengths = random_batch()
  run = lambda form: models.apply(params, tiny_config(name, attention_form=form), tokens,
                                  lengths, train=True, rng=jax.random.key(3))
  np.testing.assert_array_equal(run("parallel"), run("scan"))


# --------------------------------------------------------------------------- causality


@pytest.mark.parametrize("name", RECURRENT + ("none", "single"))
def test_later_tags_never_change_earlier_log_probs(name):
  config = tiny_config(name, pos_tags=True)
  params = random_params(config)
  tokens, tags, _ = random_batch()
  lengths = jnp.full((3,), tokens.shape[1])
  base = models.apply(params, config, tokens, lengths, tags=tags)
  for t in (1, 4):
    changed = tags.at[:, t:].set((tags[:, t:] + 3) % NUM_TAGS)
    moved = models.apply(params, config, tokens, lengths, tags=changed)
    np.testing.assert_allclose(moved[:, :t], base[:, :t], atol=1e-6)
    assert not np.allclose(moved[:, t:], base[:, t:])


@pytest.mark.parametrize("name", RECURRENT + ("none",))
def test_sentence_alone_equals_sentence_in_padded_batch_with_tags(name):
  config = tiny_config(name, pos_tags=True)
  params = random_params(config)
  tokens, tags, _ = random_batch(num_steps=9)
  alone = models.apply(params, config, tokens[:1, :4], jnp.array([4]), tags=tags[:1, :4])
  batch = models.apply(params, config, tokens.at[0, 4:].set(0), jnp.array([4, 9, 7]),
                       tags=tags.at[0, 4:].set(0))
  np.testing.assert_allclose(batch[0, :4], alone[0], atol=1e-5)


# --------------------------------------------------------------------------- training


@pytest.mark.parametrize("name", RECURRENT)
def test_every_parameter_receives_gradient_with_tags(name):
  config = tiny_config(name, pos_tags=True)
  params = random_params(config)
  tokens, tags, lengths = random_batch()
  targets = jnp.roll(tokens, -1, axis=1)

  def loss(params):
    logits = models.apply(params, config, tokens, lengths, tags=tags, train=True,
                          rng=jax.random.key(1))
    nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], -1)[..., 0]
    return jnp.sum(nll * (jnp.arange(tokens.shape[1])[None] < lengths[:, None]))

  grads = jax.grad(loss)(params)
  zero = [jax.tree_util.keystr(path) for path, g in jax.tree_util.tree_leaves_with_path(grads)
          if not jnp.any(g != 0)]
  assert not zero, f"parameters without gradient: {zero}"


@pytest.mark.parametrize("name", RECURRENT)
def test_gradients_match_the_equations(name):
  """The gradient of the log-likelihood of one sentence, through the cached keys of the
  buffers, equals that of the equations written out step by step (`numpy_model` in
  jax.numpy, every score recomputed from its slots); with POS tags, so that DAS attends over
  two input streams."""
  config = tiny_config(name, pos_tags=True)
  params = random_params(config)
  tokens, tags, lengths = random_batch()
  length = int(lengths[0])
  targets = np.asarray(tokens[0, 1:length])
  sentence, sentence_tags = np.asarray(tokens[0, :length]), np.asarray(tags[0, :length])

  def model_loglik(params):
    log_probs = jax.nn.log_softmax(models.apply(params, config, tokens[:1], lengths[:1],
                                                tags=tags[:1]))[0]
    return log_probs[jnp.arange(length - 1), targets].sum()

  def equations_loglik(params):
    log_probs, _ = numpy_model(params, config, sentence, sentence_tags, xp=jnp)
    return log_probs[jnp.arange(length - 1), targets].sum()

  got, want = jax.grad(model_loglik)(params), jax.grad(equations_loglik)(params)
  for (path, g), w in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(g, w, atol=2e-4, rtol=1e-4,
                               err_msg=jax.tree_util.keystr(path))


def test_weight_shapes_fit_inputs_of_context_and_tags():
  """The sizes each weight reads; what the inputs hold is `test_model_matches_numpy_equations`."""
  config = tiny_config("das_lstmn", pos_tags=True)
  params = models.init(jax.random.key(0), config)
  input_size = 2 * (config.hidden_size + config.tag_size)          # [w_t; p_t; w'_t; p'_t]
  assert params["lstm"][0]["w_x"].shape == (input_size, 4 * config.hidden_size)
  # The LSTMN score reads m_t = [w_t; p_t] (Cao & Yu sec. 3.3), not the DAS context.
  assert params["recurrent"]["lstmn"]["w_x"].shape == (input_size // 2, config.hidden_size)
  assert params["recurrent"]["das"]["tags"]["w_w"].shape == (config.tag_size,
                                                              config.hidden_size)


# --------------------------------------------------------------------------- errors


def test_unknown_score_lists_every_valid_name():
  with pytest.raises(ConfigError) as error:
    models.init(jax.random.key(0), tiny_config("dass"))
  message = str(error.value)
  assert "\n" not in message and "'dass'" in message
  for name in scores.SCORE_FUNCTIONS:
    assert name in message.split("choose one of: ")[1].split(", ")


def test_tag_input_without_tags_is_a_config_error():
  config = tiny_config("das", pos_tags=True)
  tokens, _, lengths = random_batch()
  with pytest.raises(ConfigError, match="no tags were given"):
    models.apply(models.init(jax.random.key(0), config), config, tokens, lengths)
