"""The training loop: data-parallel step, determinism, early stopping, the configs."""

import functools
import json
import pathlib
import runpy

import jax
import numpy as np
import pytest

from attnlm_jax import checkpoints
from attnlm_jax import models
from attnlm_jax import train
import tiny_config


def _one_step(config, devices):
  """Params and summed NLL after one train_step on the first batch, pmapped over devices."""
  config, data, params = train.prepare(config, "/nonexistent-workdir")
  state = train.initial_state(config, params)
  step = jax.pmap(functools.partial(train.train_step, model_config=config.model,
                                    optimizer=train.make_optimizer(config.train)),
                  axis_name=train.AXIS, devices=devices)
  batch = next(data.train_iterator(1))
  n = len(devices)
  sharded = {k: v.reshape(n, v.shape[0] // n, *v.shape[1:]) for k, v in batch.items()}
  rep = functools.partial(train.replicate, devices=devices)
  new_params, _, metrics = step(rep(state["params"]), rep(state["opt_state"]), sharded,
                                rep(state["rng"]), rep(np.int32(1)), rep(np.float32(1.0)))
  return train.first_replica(new_params), float(train.first_replica(metrics["nll"]))


@pytest.mark.parametrize("score", ["combined", "average"])
def test_two_device_step_equals_one_device_step(score):
  assert jax.local_device_count() == 2, "tests/conftest.py sets 2 host devices"
  config = tiny_config.config(model__dropout=0.0, model__score=score, data__batch_size=32)
  params_2, nll_2 = _one_step(config, jax.local_devices())
  params_1, nll_1 = _one_step(config, jax.local_devices()[:1])
  assert nll_2 == pytest.approx(nll_1, rel=1e-5)
  for a, b in zip(jax.tree.leaves(params_1), jax.tree.leaves(params_2)):
    np.testing.assert_allclose(a, b, atol=1e-5)


def _worsening_config():
  """Epoch 2 trains at lr 10 (the schedule multiplies by 10 after epoch 1): valid worsens."""
  return tiny_config.config(train__num_epochs=3, train__patience=1, train__lr_decay_after=1,
                            train__lr_decay_divisor=0.1)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
  """Two runs of the same config and seed in two workdirs."""
  workdirs = [tmp_path_factory.mktemp(f"run{i}") for i in range(2)]
  return [(w, train.train_and_evaluate(_worsening_config(), w)) for w in workdirs]


def _epochs(workdir: pathlib.Path) -> list[dict]:
  lines = [json.loads(l) for l in (workdir / "metrics.jsonl").read_text().splitlines()]
  return [l for l in lines if "valid_perplexity" in l]


def test_early_stopping_rolls_back_to_the_best_epoch(two_runs):
  workdir, result = two_runs[0]
  epochs = _epochs(workdir)
  assert [e["epoch"] for e in epochs] == [1, 2]        # patience 1: stops after epoch 2
  assert epochs[1]["valid_perplexity"] > epochs[0]["valid_perplexity"]
  assert result["epoch"] == 1 and result["step"] == epochs[0]["step"]
  assert result["valid"]["perplexity"] == pytest.approx(epochs[0]["valid_perplexity"],
                                                        rel=1e-5)
  ckpt = checkpoints.Checkpoints(workdir, read_only=True)
  assert ckpt.latest_step() == epochs[1]["step"]
  template = train.initial_state(_filled(_worsening_config(), workdir), result["params"])
  best, _ = ckpt.restore(epochs[0]["step"], template)
  last, _ = ckpt.restore(epochs[1]["step"], template)
  ckpt.close()
  for got, want in zip(jax.tree.leaves(result["params"]), jax.tree.leaves(best["params"])):
    np.testing.assert_array_equal(got, want)
  assert any(not np.array_equal(a, b) for a, b in
             zip(jax.tree.leaves(result["params"]), jax.tree.leaves(last["params"])))


def _filled(config, workdir):
  config.model.vocab_size = len(checkpoints.read_vocab(workdir))
  return config


def test_training_is_deterministic_for_a_seed(two_runs):
  (_, first), (_, second) = two_runs
  for a, b in zip(jax.tree.leaves(first["params"]), jax.tree.leaves(second["params"])):
    np.testing.assert_array_equal(a, b)
  assert first["valid"] == second["valid"]


def _load(name, arg=None):
  return runpy.run_path(str(tiny_config.REPO / "configs" / name))["get_config"](arg)


@pytest.mark.parametrize("name", ["default.py", "ptb.py", "wikitext2.py", "ptb_small.py",
                                  "demo.py"])
def test_configs_have_every_model_field(name):
  config = _load(name)
  assert set(config.model.keys()) == set(models.default_config().keys())
  assert config.model.vocab_size == 0
  assert config.model.max_len == config.data.max_len


@pytest.mark.parametrize("score", ["none", "proj", "single", "combined", "average",
                                   "conv1x1"])
def test_table_row_configs(score):
  ptb, wt2 = _load("ptb.py", f"score={score}"), _load("wikitext2.py", f"score={score}")
  for config in (ptb, wt2):
    assert config.model.score == score
    assert config.model.forget_bias == (1.0 if score == "average" else 0.0)
    assert (config.data.batch_size, config.data.max_len) == (32, 35)
    assert (config.train.learning_rate, config.train.grad_clip) == (1.0, 5.0)
    assert config.train.patience == 10
  assert (ptb.model.hidden_size, ptb.model.num_layers, ptb.model.dropout) == (650, 2, 0.5)
  assert (ptb.train.lr_decay_after, ptb.train.lr_decay_divisor) == (12, 2.0)
  assert (wt2.model.hidden_size, wt2.model.num_layers, wt2.model.dropout) == (1000, 2, 0.65)
  assert (wt2.train.lr_decay_after, wt2.train.lr_decay_divisor) == (14, 1.15)
  assert pathlib.Path(ptb.data.data_dir) == tiny_config.REPO.parent / "shared/data/ptb"


def test_unknown_config_argument_is_rejected():
  with pytest.raises(ValueError, match="unknown config argument 'scor'"):
    _load("ptb.py", "scor=single")
