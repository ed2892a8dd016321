"""The training loop: data-parallel step, determinism, early stopping, the configs."""

import contextlib
import functools
import itertools
import json
import os
import pathlib
import runpy
import subprocess
import sys
import threading

import jax
import numpy as np
import pytest

from attnlm_jax.common.errors import ConfigError
from attnlm_jax import models
from attnlm_jax.training import checkpoints
from attnlm_jax.training import parallel
from attnlm_jax.training import run_config
from attnlm_jax.training import steps
from attnlm_jax.training import train
import tiny_config


def _steps(config, devices, num_steps=3):
  """Params and summed NLL after `num_steps` training steps on the first batches."""
  config, data, params = train.prepare(config, "/nonexistent-workdir")
  state = steps.initial_state(config, params)
  train_step = steps.TrainStep(config, devices)
  p_state = train_step.initial_state(state["params"], state["opt_state"], 0)
  rep = functools.partial(parallel.replicate, devices=devices)
  for batch in itertools.islice(data.train_iterator(1), num_steps):
    p_state, _ = train_step(p_state, train_step.place(batch), rep(state["rng"]),
                            rep(np.float32(1.0)))
  return (parallel.first_replica(p_state.params),
          float(parallel.first_replica(p_state.totals["nll"])))


@pytest.mark.parametrize("score", ["combined", "conv1x1"])   # attention; + batch statistics
def test_with_fixed_shards_two_devices_compute_bitwise_what_one_does(score):
  assert jax.local_device_count() == 2, "tests/conftest.py sets 2 host devices"
  config = tiny_config.config(model__dropout=0.3, model__score=score, data__batch_size=32,
                              train__grad_shards=4, data__bucket=score != "conv1x1")
  params_2, nll_2 = _steps(config, jax.local_devices())
  params_1, nll_1 = _steps(config, jax.local_devices()[:1])
  assert nll_2 == nll_1
  for a, b in zip(jax.tree.leaves(params_1), jax.tree.leaves(params_2)):
    np.testing.assert_array_equal(a, b)


def test_one_shard_per_device_agrees_up_to_rounding():
  config = tiny_config.config(model__dropout=0.3, data__batch_size=32)
  params_2, nll_2 = _steps(config, jax.local_devices())
  params_1, nll_1 = _steps(config, jax.local_devices()[:1])
  assert nll_2 == pytest.approx(nll_1, rel=1e-5)
  for a, b in zip(jax.tree.leaves(params_1), jax.tree.leaves(params_2)):
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_shards_change_the_gradient_only_by_rounding():
  """4 shards of 8 rows on one device: the same SGD step as the whole batch at once."""
  config = tiny_config.config(model__dropout=0.3, data__batch_size=32)
  whole, nll_whole = _steps(config, jax.local_devices()[:1], num_steps=1)
  config.train.grad_shards = 4
  sharded, nll_sharded = _steps(config, jax.local_devices()[:1], num_steps=1)
  assert nll_sharded == pytest.approx(nll_whole, rel=1e-6)
  for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(sharded)):
    np.testing.assert_allclose(a, b, atol=1e-6)


def _worsening_config():
  """Epoch 2 trains at lr 4/3 (the schedule multiplies it by 4/3 after epoch 1): valid worsens."""
  return tiny_config.config(train__num_epochs=3, train__patience=1, train__lr_decay_after=1,
                            train__lr_decay_divisor=0.75)


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
  template = steps.initial_state(_filled(_worsening_config(), workdir), result["params"])
  best, _ = ckpt.restore(epochs[0]["step"], template)
  last, _ = ckpt.restore(epochs[1]["step"], template)
  ckpt.close()
  for got, want in zip(jax.tree.leaves(result["params"]), jax.tree.leaves(best["params"])):
    np.testing.assert_array_equal(got, want)
  assert any(not np.array_equal(a, b) for a, b in
             zip(jax.tree.leaves(result["params"]), jax.tree.leaves(last["params"])))


def test_the_plateau_schedule_is_saved_and_goes_on_after_a_resume(tmp_path):
  """Threshold 0.99: every epoch after the first leaves the perplexity on a "plateau" (none
  lowers it by 99%), so the lr is divided by 4 after each. Epoch 3 runs in a second session
  from epoch 2's checkpoint: its lr comes from the decay count saved there."""
  config = tiny_config.config(train__lr_schedule="plateau", train__lr_plateau_improvement=0.99,
                              train__lr_decay_divisor=4.0, train__patience=5)
  train.train_and_evaluate(config, tmp_path)
  config.train.num_epochs = 3
  train.train_and_evaluate(config, tmp_path)
  base = config.train.learning_rate
  assert [e["learning_rate"] for e in _epochs(tmp_path)] == [base, base, base / 4]


def test_plateau_patience_counts_across_a_resume(tmp_path):
  """Threshold 0.99 and patience 2: epochs 2 and 3 are both on the plateau, so the lr is
  divided after epoch 3, not 2. Epoch 3 runs in a second session from epoch 2's checkpoint:
  the plateau epoch counted there is saved, so epoch 4 trains at lr / 4."""
  config = tiny_config.config(train__lr_schedule="plateau", train__lr_plateau_improvement=0.99,
                              train__lr_plateau_patience=2, train__lr_decay_divisor=4.0,
                              train__patience=5, train__num_epochs=2)
  train.train_and_evaluate(config, tmp_path)
  config.train.num_epochs = 4
  train.train_and_evaluate(config, tmp_path)
  base = config.train.learning_rate
  assert [e["learning_rate"] for e in _epochs(tmp_path)] == [base, base, base, base / 4]


def test_training_ends_before_an_epoch_below_the_learning_rate_floor(tmp_path):
  config = tiny_config.config(train__learning_rate=0.5, train__lr_decay_after=1,
                              train__lr_decay_divisor=2.0, train__min_learning_rate=0.2,
                              train__num_epochs=4, train__patience=5)
  result = train.train_and_evaluate(config, tmp_path)   # Epoch 3 would train at 0.125.
  assert [e["learning_rate"] for e in _epochs(tmp_path)] == [0.5, 0.25]
  assert result["epochs"] == 2


@pytest.mark.parametrize("field, value, message", [
    ("min_learning_rate", -0.1, "min_learning_rate = -0.1 must be at least 0"),
    ("min_learning_rate", 5.0, "min_learning_rate = 5.0 is above the first epoch's learning "
                               "rate 0.5, so no epoch would train"),
    ("lr_decay_divisor", 0.0, "lr_decay_divisor = 0.0 must be positive"),
    ("learning_rate", float("nan"), "learning_rate = nan must be a positive number"),
    ("grad_clip", 0.0, "grad_clip = 0.0 must be a positive number"),
    ("grad_clip", -5.0, "grad_clip = -5.0 must be a positive number"),
    ("lr_schedule", "cosine", "lr_schedule = 'cosine' is not a schedule: use one of epochs, "
                              "plateau"),
    ("lr_plateau_improvement", 1.5, "lr_plateau_improvement = 1.5 must be a fraction"),
    ("lr_plateau_patience", 0, "lr_plateau_patience = 0 must be at least 1")])
def test_a_bad_schedule_is_refused_in_one_line(field, value, message):
  config = tiny_config.config(**{f"train__{field}": value})
  with pytest.raises(ConfigError, match=message):
    run_config.check_training(config)


@pytest.mark.parametrize("field", ["seed", "data.seed"])
def test_a_negative_seed_is_refused_before_anything_is_written(tmp_path, field):
  """numpy's generators take no negative seed: `data.seed`, the data order's, which follows
  `seed` unless given a value of its own."""
  config = tiny_config.config()
  if field == "seed":
    config.seed = -1
  else:
    config = config.copy_and_resolve_references()
    config.data.seed = -1
  with pytest.raises(ConfigError, match=rf"config.{field} = -1 must be at least 0"):
    train.train_and_evaluate(config, tmp_path / "run")
  assert not (tmp_path / "run").exists()


def test_a_floor_above_the_first_epochs_learning_rate_is_refused():
  """With lr_decay_after = 0 the first epoch already trains at lr / divisor."""
  config = tiny_config.config(train__learning_rate=1.0, train__lr_decay_after=0,
                              train__lr_decay_divisor=2.0, train__min_learning_rate=0.6)
  with pytest.raises(ConfigError, match="above the first epoch's learning rate 0.5"):
    run_config.check_training(config)


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
    assert config.train.grad_clip == 5.0 and config.train.patience == 10
  # The papers' first learning rate, except PTB's `average` (it does not learn at 1.0) and
  # `conv1x1` (at 1.0 it does not learn in its first 400 steps).
  assert ptb.train.learning_rate == (0.5 if score in ("average", "conv1x1") else 1.0)
  assert wt2.train.learning_rate == 1.0
  assert (ptb.model.hidden_size, ptb.model.num_layers, ptb.model.dropout) == (650, 2, 0.5)
  assert (ptb.train.lr_decay_after, ptb.train.lr_decay_divisor) == (12, 2.0)
  assert (wt2.model.hidden_size, wt2.model.num_layers, wt2.model.dropout) == (1000, 2, 0.65)
  assert (wt2.train.lr_decay_after, wt2.train.lr_decay_divisor) == (14, 1.15)
  assert pathlib.Path(ptb.data.data_dir) == tiny_config.REPO.parent / "shared/data/ptb"
  small = _load("ptb_small.py", f"score={score}")   # The ptb_cpu table: conv1x1 starts lower.
  assert small.train.learning_rate == (0.5 if score == "conv1x1" else 1.0)
  # conv1x1's batch norm trains on batches of random sentences (`check_config`).
  demo = _load("demo.py", f"score={score}")
  assert [c.data.bucket for c in (ptb, wt2, small, demo)] == [score != "conv1x1"] * 4


def test_batch_statistics_refuse_batches_bucketed_by_length():
  for score, bucket, refused in (("conv1x1", True, True), ("conv1x1", False, False),
                                 ("combined", True, False)):
    config = tiny_config.config(model__score=score, model__vocab_size=50, data__bucket=bucket)
    if refused:
      with pytest.raises(ConfigError, match="when its own sentence ends.*bucket=false"):
        run_config.check_training(config)
    else:
      run_config.check_training(config)


def test_unknown_config_argument_is_rejected():
  with pytest.raises(ValueError, match="unknown config argument 'scor'"):
    _load("ptb.py", "scor=single")


# The command of the committed reference log (tests/training/reference/README.md).
DEMO_EPOCH = ["-m", "attnlm_jax.main", "--config=configs/demo.py", "--config.train.num_epochs=1",
              "--config.train.log_every_steps=10"]
REFERENCE_LOG = pathlib.Path(__file__).parent / "reference" / "demo_epoch.jsonl"


@pytest.fixture(scope="module")
def demo_epochs(tmp_path_factory):
  """{devices: (final record, metrics.jsonl's records)} of DEMO_EPOCH as separate processes
  with 1 and 2 host devices."""
  runs = {}
  for devices in (1, 2):
    workdir = tmp_path_factory.mktemp(f"demo_{devices}_devices")
    result = subprocess.run(
        [sys.executable, *DEMO_EPOCH, f"--workdir={workdir}"],
        cwd=tiny_config.REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"})
    assert result.returncode == 0, result.stderr[-3000:]
    runs[devices] = (json.loads(result.stdout.splitlines()[-1]),
                     _records(workdir / "metrics.jsonl"))
  return runs


def _records(path) -> list[dict]:
  return [json.loads(line) for line in pathlib.Path(path).read_text().splitlines()]


def test_one_demo_epoch_gives_the_same_perplexity_on_one_and_two_devices(demo_epochs):
  """configs/demo.py (dropout on, its fixed `grad_shards`) for one epoch, as separate
  processes with 1 and 2 host devices: the same training, every logged loss bit for bit;
  evaluation adds the devices' sums in another order (docs/training.md, "Devices")."""
  (one, one_log), (two, two_log) = demo_epochs[1], demo_epochs[2]
  losses = lambda log: [(r["step"], r["train_loss"]) for r in log if "train_loss" in r]
  assert losses(one_log) == losses(two_log) and len(losses(one_log)) > 10
  assert one["valid_perplexity"] == pytest.approx(two["valid_perplexity"], rel=1e-6)
  assert one["test_perplexity"] == pytest.approx(two["test_perplexity"], rel=1e-6)


def test_one_demo_epoch_retrains_the_committed_log(demo_epochs):
  """The 1-device run against the committed log of the same command: every loss and
  perplexity bit for bit on the CPU (model, vector extensions, count) and jax version that
  wrote the log. Elsewhere the first ten steps' loss agrees to float32 rounding; the later
  steps drift apart by rounding that SGD amplifies as it would a change of seed
  (docs/training.md, "Versions of JAX")."""
  reference, rerun = _records(REFERENCE_LOG), demo_epochs[1][1]
  machine = lambda start: (start["cpu_model"], start["cpu_features"], start["host_cpus"],
                           start["versions"]["jax"], start["versions"]["jaxlib"])
  untimed = lambda records: [{key: value for key, value in record.items()
                              if key not in ("tokens_per_second", "train_seconds")}
                             for record in records[1:]]
  # The log predates the train fields of steps.ADDED_FIELDS: it trained with their defaults.
  assert {**steps.ADDED_FIELDS, **reference[0]["config"]["train"]} == rerun[0]["config"]["train"]
  if machine(reference[0]) == machine(rerun[0]):
    assert untimed(rerun) == untimed(reference)
  else:
    assert (rerun[1]["step"], reference[1]["step"]) == (10, 10)
    assert rerun[1]["train_loss"] == pytest.approx(reference[1]["train_loss"], rel=1e-6)


def test_a_new_train_step_of_the_same_model_reuses_the_compiled_step():
  """The programs compiled for one TrainStep serve the next of the same model config (a
  resumed run, the next table row), and a different model gets its own."""
  config = tiny_config.config()
  config.model.vocab_size = 50
  other = tiny_config.config(model__score="average")
  other.model.vocab_size = 50
  first, second = steps.TrainStep(config), steps.TrainStep(config.copy_and_resolve_references())
  assert first._gradients is second._gradients
  assert steps.TrainStep(other)._gradients is not first._gradients


# jax.monitoring's event for each program XLA compiles (jax._src.dispatch's name, public
# through the listener only; the same string in jax 0.10 and 0.11).
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


@contextlib.contextmanager
def _compiled_programs():
  """The names of the programs XLA compiles (or reads from the persistent cache) inside the
  block: every program a call did not find already compiled in this process."""
  names = []

  def listen(event, duration, fun_name="", **unused):
    del duration, unused
    if event == BACKEND_COMPILE_EVENT:
      names.append(fun_name)

  jax.monitoring.register_event_duration_secs_listener(listen)
  try:
    yield names
  finally:
    jax.monitoring.unregister_event_duration_listener(listen)


def _an_epoch_and_its_evaluation(config, compile_first: bool) -> tuple[list, list]:
  """The programs compiled while training one epoch of `config`, and those compiled while
  evaluating valid and test after it; after `train.compile_steps` when `compile_first`."""
  config, data, params = train.prepare(config, "/nonexistent-workdir")
  state = steps.initial_state(config, params)
  train_step, evaluator = steps.TrainStep(config), steps.Evaluator(config.model)
  p_state = train_step.initial_state(state["params"], state["opt_state"], 0)
  p_rng, p_lr = parallel.replicate(state["rng"]), parallel.replicate(np.float32(1.0))
  if compile_first:
    train.compile_steps(train_step, evaluator, p_state, p_rng, data, 1, config)
  with _compiled_programs() as in_training:
    for batch in data.train_iterator(1):
      p_state, _ = train_step(p_state, train_step.place(batch), p_rng, p_lr)
  with _compiled_programs() as in_evaluation:
    for split in ("valid", "test"):
      evaluator(p_state.params, data, split, config.data.eval_batch_size)
  return in_training, in_evaluation


def test_evaluation_programs_compiled_at_once_on_many_threads_serve_the_evaluation():
  """The evaluation compilations of a new `Evaluator`, all started at the same instant on
  threads of their own, leave nothing to compile when it evaluates. A pmapped step makes its
  program cache at its first use; two threads making it at once would each fill their own,
  and a shape would compile again at its first call."""
  widths = dict(data__bucket=True, data__width_multiple=2, data__max_len=12,
                data__eval_batch_size=40)
  config, data, params = train.prepare(tiny_config.config(model__hidden_size=22, **widths),
                                       "/nonexistent-workdir")
  stacked = parallel.replicate(params)
  compiled_again = []
  for _ in range(4):
    evaluator = steps.Evaluator(config.model)  # a new step: programs of its own
    compilations = evaluator.compilations(stacked, data, ("valid", "test"),
                                          config.data.eval_batch_size)
    assert len(compilations) >= 3
    barrier = threading.Barrier(len(compilations))
    threads = [threading.Thread(target=lambda job=job: (barrier.wait(), job()))
               for job in compilations]
    for thread in threads:
      thread.start()
    for thread in threads:
      thread.join()
    with _compiled_programs() as in_evaluation:
      for split in ("valid", "test"):
        evaluator(stacked, data, split, config.data.eval_batch_size)
    compiled_again += in_evaluation
  assert compiled_again == []


def test_the_steps_compiled_before_training_serve_every_batch_width_of_the_epoch():
  """`train.compile_steps` compiles, before the first step, the training step of each
  batch width (on each device) and the evaluation step of each batch shape: an epoch then
  compiles only the update (the pmapped `apply_gradients`, the same for every width, once:
  the initial state is laid out as the update's outputs are), and its evaluation nothing.
  Without it, each width compiles when its first batch comes (a new hidden size keeps these
  programs out of every other test's)."""
  widths = dict(data__bucket=True, data__width_multiple=2, data__max_len=12,
                data__batch_size=40, data__eval_batch_size=40)
  training, evaluation = _an_epoch_and_its_evaluation(
      tiny_config.config(model__hidden_size=14, **widths), compile_first=False)
  config = tiny_config.config(model__hidden_size=18, **widths)
  widths_of_epoch = train.prepare(config, "/nonexistent-workdir")[1].train_widths(1)
  assert len(widths_of_epoch) >= 4
  gradients = "jit(shard_gradients)"
  assert training.count(gradients) == len(widths_of_epoch) * jax.local_device_count()
  assert len(training) == training.count(gradients) + 1
  assert len(evaluation) >= 3
  training, evaluation = _an_epoch_and_its_evaluation(config, compile_first=True)
  assert len(training) == 1 and gradients not in training
  assert evaluation == []


def test_a_lone_spike_is_not_divergence_however_often_the_loss_is_logged():
  """The check judges the mean of at least DIVERGENCE_MIN_STEPS steps where the session has
  them: a one-step interval at 13 nats after 49 steps at 5 is 5.16 (below 2 ln 372 = 11.8),
  50 steps at 13 are divergence, and the first interval of a session is judged alone."""
  vocab_size = 372
  assert train.DIVERGENCE_MIN_STEPS == 50
  recent = train.RecentLoss()
  assert train.divergence(recent.mean(1, 130.0, 10), vocab_size)        # alone: 13 nats
  for _ in range(49):
    recent.add(1, 50.0, 10)
  assert recent.mean(1, 130.0, 10) == pytest.approx((49 * 50.0 + 130.0) / 500)
  assert train.divergence(recent.mean(1, 130.0, 10), vocab_size) is None
  for _ in range(200):
    recent.add(1, 130.0, 10)
  assert len(recent._intervals) == 49                  # only what the next mean reads
  assert recent.mean(1, 130.0, 10) == pytest.approx(13.0)
  assert "more than twice a uniform guess's 5.92" in train.divergence(
      recent.mean(1, 130.0, 10), vocab_size)
  recent.add(100, 500.0, 100)                          # a long interval stands alone
  assert recent.mean(60, 300.0, 100) == pytest.approx(3.0)
