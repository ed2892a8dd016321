"""The released code's network (configs/released.py): its memory as the released training
graph holds it (the zero slot alone: context 0, no gradient to attention), and each field
that differs from the paper changing what it says and nothing else."""

import runpy

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlm_jax import data as data_lib
from attnlm_jax import models
from attnlm_jax.common.errors import ConfigError
from attnlm_jax.data import batching
from attnlm_jax.models import losses
from attnlm_jax.training import parallel
from attnlm_jax.training import steps
import tiny_config

RELEASED = {"head_activation": "linear", "dropout_site": "after_head",
            "head_bias_init": "uniform", "memory": "zero_slot", "forget_bias": 1.0}


def tiny(score="single", **overrides):
  config = models.default_config()
  config.update(vocab_size=23, hidden_size=8, num_layers=2, max_len=6, score=score,
                dropout=0.5, **overrides)
  return config


def batch(seed=0):
  rng = np.random.default_rng(seed)
  tokens = jnp.asarray(rng.integers(0, 23, (3, 6)), jnp.int32)
  return tokens, jnp.asarray([6, 4, 1], jnp.int32)


def loss(params, config, tokens, lengths, rng):
  logits = models.apply(params, config, tokens, lengths, train=True, rng=rng)
  return losses.loss(logits, jnp.roll(tokens, -1, axis=1), lengths)


@pytest.mark.parametrize("form", ["parallel", "scan"])
@pytest.mark.parametrize("score", ["single", "combined"])
def test_the_released_memory_gives_context_zero_and_attention_no_gradient(form, score):
  """Every step attends over the one zero slot with weight 1, so h'_t = W_h h_t + b exactly,
  and the score's parameters and W_c get exactly zero gradient; the rest learns."""
  config = tiny(score, attention_form=form, **RELEASED)
  params = models.init(jax.random.key(0), config)
  tokens, lengths = batch()
  _, weights, query = models.apply(params, config, tokens, lengths, return_attention=True,
                                   return_hidden=True)
  np.testing.assert_array_equal(weights[..., 0], 1.0)
  np.testing.assert_array_equal(weights[..., 1:], 0.0)
  head = models.apply(params, config, tokens, lengths, return_hidden=True, hidden="head")[1]
  np.testing.assert_allclose(head, query @ params["head"]["w_h"] + params["head"]["b"],
                             atol=1e-6)
  grads = jax.grad(loss)(params, config, tokens, lengths, jax.random.key(1))
  for leaf in (*jax.tree.leaves(grads["score"]), grads["head"]["w_c"]):
    np.testing.assert_array_equal(leaf, 0.0)
  for leaf in (grads["head"]["w_h"], grads["embed"], grads["lstm"][0]["w_h"]):
    assert np.abs(leaf).max() > 0


def test_a_filled_memory_reads_the_past_where_the_released_one_reads_zero():
  filled = tiny(**{**RELEASED, "memory": "filled"})
  params = models.init(jax.random.key(0), filled)
  tokens, lengths = batch()
  weights = models.apply(params, filled, tokens, lengths, return_attention=True)[1]
  assert float(weights[0, -1, 1:].sum()) > 0.1          # the last step reads h_1 .. h_5
  grads = jax.grad(loss)(params, filled, tokens, lengths, jax.random.key(1))
  assert np.abs(grads["head"]["w_c"]).max() > 0


def test_the_released_memory_decodes_as_it_trains():
  """`models.step`, one token at a time (a running mean for `single`), equals `apply`."""
  config = tiny(**RELEASED)
  params = models.init(jax.random.key(0), config)
  tokens = batch()[0]
  state = models.init_state(params, config, 3)
  stepped = []
  for t in range(tokens.shape[1]):
    logits, state = models.step(params, config, state, tokens[:, t])
    stepped.append(logits)
  full = models.apply(params, config, tokens, jnp.full((3,), 6, jnp.int32))
  np.testing.assert_allclose(jnp.stack(stepped, 1), full, atol=1e-5)


def test_a_linear_head_is_the_tanh_heads_input():
  tokens, lengths = batch()
  linear = tiny(head_activation="linear")
  params = models.init(jax.random.key(0), linear)
  head = lambda config: models.apply(params, config, tokens, lengths, return_hidden=True,
                                     hidden="head")[1]
  np.testing.assert_allclose(jnp.tanh(head(linear)), head(tiny()), atol=1e-6)
  proj = tiny("proj", head_activation="linear")
  proj_params = models.init(jax.random.key(0), proj)
  np.testing.assert_allclose(
      jnp.tanh(models.apply(proj_params, proj, tokens, lengths, return_hidden=True,
                            hidden="head")[1]),
      models.apply(proj_params, tiny("proj"), tokens, lengths, return_hidden=True,
                   hidden="head")[1], atol=1e-6)


def test_the_output_dropout_falls_on_h_or_on_h_prime():
  """The same masks: on h_t (the query) before the head, or on h'_t after it."""
  tokens, lengths = batch()
  before, after = tiny(), tiny(dropout_site="after_head")
  params = models.init(jax.random.key(0), before)
  run = lambda config, hidden: models.apply(params, config, tokens, lengths, train=True,
                                            rng=jax.random.key(3), return_hidden=True,
                                            hidden=hidden)[1]
  dropped = run(before, "lstm") == 0
  assert dropped.any() and not (run(after, "lstm") == 0).any()
  np.testing.assert_array_equal(run(after, "head") == 0, dropped)
  evaluation = lambda config: models.apply(params, config, tokens, lengths)
  np.testing.assert_array_equal(evaluation(before), evaluation(after))   # no dropout there


def test_a_uniform_head_bias_changes_that_bias_alone():
  zeros = models.init(jax.random.key(0), tiny())
  uniform = models.init(jax.random.key(0), tiny(head_bias_init="uniform"))
  b = uniform["head"].pop("b")
  assert zeros["head"].pop("b").sum() == 0 and 0 < np.abs(b).max() <= 0.05
  assert np.abs(b).min() > 0
  jax.tree.map(np.testing.assert_array_equal, uniform, zeros)


@pytest.mark.parametrize("field,value", [("head_activation", "sigmoid"), ("memory", "empty"),
                                         ("dropout_site", "input"), ("head_bias_init", "ones")])
def test_an_unknown_value_is_a_one_line_error(field, value):
  with pytest.raises(ConfigError, match=f"unknown {field} '{value}'.*choose one of"):
    models.validate(tiny(**{field: value}))


def test_the_zero_slot_memory_needs_attention_and_the_zero_slot():
  with pytest.raises(ConfigError, match="needs config.model.zero_slot=True"):
    models.validate(tiny("none", memory="zero_slot"))
  with pytest.raises(ConfigError, match="needs config.model.zero_slot=True"):
    models.validate(tiny(memory="zero_slot", zero_slot=False))
  config = tiny(memory="zero_slot")
  with pytest.raises(ConfigError, match="no stream form"):
    models.init_stream_state(models.init(jax.random.key(0), config), config, 2)


@pytest.mark.parametrize("score, field, value, message", [
    ("conv1x1", "memory", "zero_slot", "batch norm keeps statistics per sentence position"),
    ("conv1x1", "head_bias_init", "uniform", "output layer has none"),
    ("none", "head_bias_init", "uniform", "output layer has none"),
    ("none", "head_activation", "linear", "output layer has none"),
    ("conv1x1", "head_activation", "linear", "output layer has none"),
    ("das", "head_activation", "linear", "output layer has none"),
])
def test_a_released_field_the_score_cannot_take_is_refused(score, field, value, message):
  with pytest.raises(ConfigError, match=message):
    models.validate(tiny(score, **{field: value}))
  models.validate(tiny("single", **{field: value}))  # The released network's own score.


def _data(**overrides):
  config = tiny_config.config(**{"data__bucket": False, **overrides})
  return data_lib.load(config.data)


def test_without_a_start_symbol_a_row_reads_its_first_word_and_predicts_the_rest():
  with_symbol, without = _data(), _data(data__start_symbol=False)
  sentence = with_symbol.sentences("valid")[0]                 # word ids, then EOS_ID
  plan = batching.eval_plan(without.units("valid")[1], 1000)
  index, row = (int(i[0]) for i in np.nonzero(plan == 0))
  found = list(without.eval_batches("valid", 1000))[index]
  n = len(sentence) - 1
  np.testing.assert_array_equal(found["inputs"][row, :n], sentence[:-1])
  np.testing.assert_array_equal(found["targets"][row, :n], sentence[1:])
  assert found["lengths"][row] == n
  lengths = with_symbol.units("train")[1]
  assert without.train_tokens_per_epoch() == np.minimum(lengths - 1,
                                                        without.config.max_len).sum()


def test_without_a_start_symbol_the_released_rule_counts_the_unread_first_words():
  """exp(nll / (predicted + sentences)): the released code's denominator, by hand."""
  sums = {"nll": 30.0, "nll_after_first": 30.0, "tokens": 10.0, "sentences": 2.0}
  result = losses.perplexities(sums, released_count=12.0)
  assert result["perplexity"] == pytest.approx(np.exp(3.0))
  assert result["perplexity_paper_convention"] == pytest.approx(np.exp(30.0 / 12.0))
  data = _data(data__start_symbol=False)
  config = tiny_config.config(data__bucket=False, data__start_symbol=False).model
  config.vocab_size = len(data.vocab)
  params = models.init(jax.random.key(0), config)
  result = steps.Evaluator(config)(parallel.replicate(params), data, "valid", 1000)
  assert result["perplexity_paper_convention"] == pytest.approx(
      np.exp(result["nll"] / (result["tokens"] + result["sentences"])), rel=1e-9)
  assert result["sentences"] == len(data.sentences("valid"))


def test_without_shuffling_the_batches_are_consecutive_sentences_in_every_epoch():
  data = _data(data__shuffle=False)
  plans = [data.train_plan(epoch) for epoch in (1, 2)]
  np.testing.assert_array_equal(plans[0], plans[1])
  filled = plans[0].ravel()
  np.testing.assert_array_equal(filled[filled >= 0], np.arange(len(data.units("train")[1])))
  assert not np.array_equal(_data().train_plan(1), _data().train_plan(2))


def test_corpus_order_refuses_bucketing_and_no_start_symbol_refuses_documents():
  with pytest.raises(data_lib.CorpusError, match="shuffle=False.*bucket=false"):
    _data(data__shuffle=False, data__bucket=True)
  with pytest.raises(data_lib.CorpusError, match="start_symbol=False.*'sentence' only"):
    _data(data__start_symbol=False, data__span="document")


def test_the_released_config_is_the_ptb_row_with_the_released_fields_alone():
  load = lambda name, arg: runpy.run_path(f"configs/{name}.py")["get_config"](arg)
  flat = lambda config: {f"{section}.{key}": value
                         for section, fields in config.to_dict().items()
                         if isinstance(fields, dict) for key, value in fields.items()}
  paper, released = flat(load("ptb", "score=single")), flat(load("released", None))
  changed = {key for key in paper if paper[key] != released[key]}
  assert changed == {"model.head_activation", "model.dropout_site", "model.head_bias_init",
                     "model.memory", "model.forget_bias", "train.lr_decay_after",
                     "data.shuffle", "data.bucket", "data.start_symbol"}
  assert load("released", "memory=filled").model.memory == "filled"
