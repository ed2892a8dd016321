"""The stream protocol: stream rows and windows, carried state, causality across windows."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from attnlm_jax.common.errors import ConfigError
from attnlm_jax import data as data_lib
from attnlm_jax.data import batching
from attnlm_jax import models
from attnlm_jax.models import lm
from attnlm_jax.models import scores
from attnlm_jax.training import parallel
from attnlm_jax.training import steps

STREAM_SCORES = ("none", "proj", "single", "combined", "average", "das", "lstmn", "das_lstmn")
VOCAB, WINDOW, ROWS = 23, 7, 3


def _data_config(**overrides) -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict(dict(
      corpus="embedded", data_dir="", source="text", batch_size=4, eval_batch_size=6,
      max_len=5, bucket=False, span="stream", seed=0))
  config.update(overrides)
  return config


def test_stream_rows_cover_every_token_once():
  starts, lengths = batching.stream_rows(10, 4)
  assert starts.tolist() == [0, 3, 6, 9] and lengths.tolist() == [3, 3, 3, 1]
  covered = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lengths)])
  assert covered.tolist() == list(range(10))
  assert batching.num_stream_windows(lengths, 2) == 2


@pytest.mark.parametrize("split, streams", [("valid", 6), ("train", 6), ("train", 3)])
def test_windows_continue_the_stream_and_predict_every_token_once(split, streams):
  """Evaluation's windows read every token once, the training split's too: at other than
  training's 4 streams, its windows are not a training epoch's."""
  data = data_lib.load(_data_config())
  tokens = data.split(split).tokens
  batches = list(data.eval_batches(split, streams))
  assert len(batches) == data.num_windows(split, streams)
  assert sum(int(b["lengths"].sum()) for b in batches) == len(tokens)
  starts, _ = data.stream_rows(split, streams)
  for row, start in enumerate(starts):
    stream = np.concatenate([b["targets"][row, :b["lengths"][row]] for b in batches])
    np.testing.assert_array_equal(stream, tokens[start:start + len(stream)])
    inputs = np.concatenate([b["inputs"][row, :b["lengths"][row]] for b in batches])
    previous = tokens[start - 1] if start else data_lib.EOS_ID
    np.testing.assert_array_equal(inputs, np.concatenate([[previous], stream[:-1]]))
  train = data.train_iterator(1)
  assert data.num_train_batches() == len(list(train))


def test_bucketing_a_stream_is_refused_in_one_line():
  with pytest.raises(data_lib.CorpusError, match="bucket=false"):
    data_lib.load(_data_config(bucket=True))


def _model(score, form, **overrides):
  config = models.default_config()
  fields = dict(vocab_size=VOCAB, hidden_size=8, num_layers=2, score=score, max_len=5,
                init_scale=0.5, attention_form=form, tie_embeddings=score != "none")
  config.update({**fields, **overrides})
  return config, models.init(jax.random.key(0), config)


def _tokens(seed=0):
  return np.random.default_rng(seed).integers(1, VOCAB, (ROWS, 2 * WINDOW)).astype(np.int32)


def _two_windows(params, config, tokens, lengths_2):
  """Logits [B, 2T, V] of two consecutive windows from the initial stream state."""
  state = models.init_stream_state(params, config, ROWS)
  first, state, _ = models.apply_window(params, config, tokens[:, :WINDOW],
                                        np.full(ROWS, WINDOW, np.int32), state)
  second, state, _ = models.apply_window(params, config, tokens[:, WINDOW:], lengths_2, state)
  return np.concatenate([first, second], axis=1)


def _stepped(params, config, tokens):
  """Logits [B, 2T, V] of the same tokens fed to `models.step` one at a time."""
  state = models.init_stream_state(params, config, ROWS)
  step = jax.jit(lambda state, token: models.step(params, config, state, token))
  stepped = []
  for t in range(2 * WINDOW):
    logits, state = step(state, tokens[:, t])
    stepped.append(logits)
  return np.stack(stepped, 1)


@pytest.mark.parametrize("form", ["parallel", "scan"])
@pytest.mark.parametrize("score", STREAM_SCORES)
def test_two_windows_equal_step_token_by_token(score, form):
  config, params = _model(score, form)
  tokens, lengths_2 = _tokens(), np.array([WINDOW, WINDOW, 4], np.int32)
  windows = _two_windows(params, config, tokens, lengths_2)
  valid = np.concatenate([np.ones((ROWS, WINDOW), bool),
                          np.arange(WINDOW)[None] < lengths_2[:, None]], axis=1)
  np.testing.assert_allclose(windows[valid], _stepped(params, config, tokens)[valid], atol=2e-6)
  # The carried state matters: the second window alone, from a fresh state, differs.
  fresh = models.apply(params, config, tokens[:, WINDOW:], lengths_2)
  assert np.abs(fresh - windows[:, WINDOW:])[valid[:, WINDOW:]].max() > 1e-3


def test_a_windows_gradients_equal_those_of_step_token_by_token():
  """A scan cuts each step's DAS buffer from the window's whole sequence of inputs and
  recomputes its reads in the backward pass; `step` writes the ring token by token: the same
  function of the parameters from a carried state (whose keys each recomputes), gradients
  included. DAS-LSTMN: the DAS buffer and the LSTMN tapes at once."""
  score = "das_lstmn"
  config, params = _model(score, "scan")
  tokens, full = _tokens(), np.full(ROWS, WINDOW, np.int32)
  state = models.init_stream_state(params, config, ROWS)
  _, state, _ = models.apply_window(params, config, tokens[:, :WINDOW], full, state)
  targets = jnp.asarray(_tokens(seed=1)[:, :WINDOW])
  log_prob = lambda logits, t: jnp.sum(jnp.take_along_axis(
      jax.nn.log_softmax(logits), targets[:, t, None], axis=-1))

  def window(params):
    logits, _, _ = models.apply_window(params, config, tokens[:, WINDOW:], full, state)
    return sum(log_prob(logits[:, t], t) for t in range(WINDOW))

  def stepped(params):
    carried = lm._with_keys(params, config, scores.get(score), state)
    total = 0.0
    for t in range(WINDOW):
      logits, carried = models.step(params, config, carried, tokens[:, WINDOW + t])
      total += log_prob(logits, t)
    return total

  (got, got_grads), (want, want_grads) = (jax.value_and_grad(f)(params)
                                          for f in (window, stepped))
  np.testing.assert_allclose(got, want, rtol=1e-6)
  for (path, got_leaf), want_leaf in zip(jax.tree_util.tree_leaves_with_path(got_grads),
                                         jax.tree.leaves(want_grads)):
    np.testing.assert_allclose(got_leaf, want_leaf, atol=1e-5,
                               err_msg=jax.tree_util.keystr(path))


@pytest.mark.parametrize("score", ["lstmn", "das_lstmn"])
def test_a_shorter_tape_is_carried_across_windows_and_equals_step(score):
  """tape_slots = 3 (h_0 and two states) against the window's max_len = 5: windows and
  token-by-token steps agree; the first three steps, whose tapes hold at most two states,
  match the default tapes of five slots, and every later step differs from them."""
  config, params = _model(score, "scan", tape_slots=3)
  tokens, full = _tokens(), np.full(ROWS, WINDOW, np.int32)
  windows = _two_windows(params, config, tokens, full)
  np.testing.assert_allclose(windows, _stepped(params, config, tokens), atol=2e-6)
  default = _two_windows(params, _model(score, "scan")[0], tokens, full)
  np.testing.assert_allclose(windows[:, :3], default[:, :3], atol=2e-6)
  assert np.abs(windows[:, 3:] - default[:, 3:]).max(axis=(0, 2)).min() > 1e-3


@pytest.mark.parametrize("score", ["single", "combined", "average"])
def test_the_memory_is_carried_across_the_window_boundary(score):
  """With the LSTM state carried but the memory emptied, the second window's first steps
  differ: they attend to the end of the first window."""
  config, params = _model(score, "parallel")
  tokens = _tokens()
  full = np.full(ROWS, WINDOW, np.int32)
  state = models.init_stream_state(params, config, ROWS)
  _, state, _ = models.apply_window(params, config, tokens[:, :WINDOW], full, state)
  carried, _, _ = models.apply_window(params, config, tokens[:, WINDOW:], full, state)
  empty = state._replace(memory=models.init_stream_state(params, config, ROWS).memory)
  emptied, _, _ = models.apply_window(params, config, tokens[:, WINDOW:], full, empty)
  assert np.abs(carried[:, 0] - emptied[:, 0]).max() > 1e-3


def _scramble_keys(state):
  """The state with every cached key (memory, DAS buffer, LSTMN h tape) replaced by noise."""
  def noise(memory):
    if memory is None or memory.keys is None:
      return memory
    return memory._replace(keys=jax.random.normal(jax.random.key(7), memory.keys.shape))
  tapes = None if state.tapes is None else state.tapes._replace(h=noise(state.tapes.h))
  return state._replace(memory=noise(state.memory), inputs=noise(state.inputs), tapes=tapes)


@pytest.mark.parametrize("score", ["single", "combined", "das", "lstmn", "das_lstmn"])
def test_a_window_scores_carried_slots_with_its_own_parameters(score):
  """The keys a state carries were computed with the parameters of the window before (an SGD
  step ago in training); the next window recomputes them from the carried states, so the
  scan form gives what the parallel form gives, and the keys carried change nothing."""
  config, params = _model(score, "scan")
  tokens, full = _tokens(), np.full(ROWS, WINDOW, np.int32)
  state = models.init_stream_state(params, config, ROWS)
  _, state, _ = models.apply_window(params, config, tokens[:, :WINDOW], full, state)
  updated = jax.tree.map(lambda x: x * 1.1, params)       # the parameters after an update
  second, _, _ = models.apply_window(updated, config, tokens[:, WINDOW:], full, state)
  scrambled, _, _ = models.apply_window(updated, config, tokens[:, WINDOW:], full,
                                        _scramble_keys(state))
  np.testing.assert_allclose(scrambled, second, atol=1e-6)
  if score in ("single", "combined"):
    parallel_config, _ = _model(score, "parallel")
    parallel, _, _ = models.apply_window(updated, parallel_config, tokens[:, WINDOW:], full,
                                         state)
    np.testing.assert_allclose(parallel, second, atol=2e-6)


@pytest.mark.parametrize("form", ["parallel", "scan"])
@pytest.mark.parametrize("score", STREAM_SCORES)
def test_causal_across_windows(score, form):
  """Changing token k of the stream moves no prediction before position k, in either
  window."""
  config, params = _model(score, form)
  full = np.full(ROWS, WINDOW, np.int32)
  tokens = _tokens()
  base = _two_windows(params, config, tokens, full)
  for k in (WINDOW - 1, WINDOW, WINDOW + 2):
    changed = tokens.copy()
    changed[:, k] = (changed[:, k] % (VOCAB - 1)) + 1
    logits = _two_windows(params, config, changed, full)
    np.testing.assert_allclose(logits[:, :k], base[:, :k], atol=1e-6)
    assert np.abs(logits[:, k] - base[:, k]).max() > 1e-4


@pytest.mark.parametrize("score", ["das", "das_lstmn"])
def test_tag_inputs_are_carried_across_windows_and_equal_step(score):
  """The POS-tag row of the `das` table under the stream protocol: two windows with tags
  equal `step` fed word and tag token by token, and a tag changed at position k moves no
  prediction before k, in either window (its own attention over the tags included)."""
  config, params = _model(score, "scan", pos_tags=True, num_tags=5, tag_size=3)
  tokens = _tokens()
  tags = np.random.default_rng(1).integers(1, 5, tokens.shape).astype(np.int32)
  full = np.full(ROWS, WINDOW, np.int32)

  def two_windows(tags):
    state = models.init_stream_state(params, config, ROWS)
    first, state, _ = models.apply_window(params, config, tokens[:, :WINDOW], full, state,
                                          tags=tags[:, :WINDOW])
    second, _, _ = models.apply_window(params, config, tokens[:, WINDOW:], full, state,
                                       tags=tags[:, WINDOW:])
    return np.concatenate([first, second], axis=1)

  windows = two_windows(tags)
  state = models.init_stream_state(params, config, ROWS)
  step = jax.jit(lambda state, token, tag: models.step(params, config, state, token, tag))
  stepped = []
  for t in range(2 * WINDOW):
    logits, state = step(state, tokens[:, t], tags[:, t])
    stepped.append(logits)
  np.testing.assert_allclose(windows, np.stack(stepped, 1), atol=2e-6)
  for k in (WINDOW - 1, WINDOW + 2):
    changed = tags.copy()
    changed[:, k] = changed[:, k] % 4 + 1
    logits = two_windows(changed)
    np.testing.assert_allclose(logits[:, :k], windows[:, :k], atol=1e-6)
    assert np.abs(logits[:, k] - windows[:, k]).max() > 1e-4


def test_a_score_without_a_stream_form_is_refused():
  config, params = _model("conv1x1", "parallel")
  with pytest.raises(ConfigError, match="span='sentence'"):
    models.init_stream_state(params, config, ROWS)


def test_untied_softmax_is_its_own_matrix():
  config, params = _model("none", "parallel")
  assert params["softmax"].shape == params["embed"].shape
  tokens = _tokens()[:, :WINDOW]
  lengths = np.full(ROWS, WINDOW, np.int32)
  logits = models.apply(params, config, tokens, lengths)
  moved = {**params, "softmax": params["softmax"] * 2}
  moved_logits = models.apply(moved, config, tokens, lengths)
  np.testing.assert_allclose(moved_logits - params["out_bias"],
                             2 * (logits - params["out_bias"]), rtol=1e-5, atol=1e-6)
  tied, tied_params = _model("proj", "parallel")
  assert "softmax" not in tied_params


@pytest.mark.parametrize("score", ["single", "combined"])
def test_stream_evaluation_predicts_every_token_once_on_two_devices(score):
  """Evaluation's windows, split over two devices, score each token of the split once: the
  per-token log-probs (`evaluate.split_log_probs`, what interpolation mixes) fill every
  position of the split and sum to the evaluation's NLL."""
  from attnlm_jax.evaluation import evaluate  # pylint: disable=g-import-not-at-top
  assert jax.local_device_count() == 2
  model_config, params = _model(score, "parallel", vocab_size=372)
  data = data_lib.load(_data_config())
  config = ml_collections.ConfigDict({"model": model_config, "data": _data_config()})
  model = evaluate.TrainedModel(config, data.vocab, params, step=1)
  tokens, log_probs = evaluate.split_log_probs(model, "valid")
  np.testing.assert_array_equal(tokens, data.split("valid").tokens)
  assert np.all(log_probs < 0)                      # every position was written
  result = steps.Evaluator(model_config)(parallel.replicate(params), data, "valid", 6)
  assert result["tokens"] == len(tokens)
  assert result["sentences"] == int((tokens == data_lib.EOS_ID).sum())   # not windows x rows
  assert -log_probs.sum() == pytest.approx(result["nll"], rel=1e-5)
