"""The benchmarks' FLOP count agrees with XLA's own count of the same computation
(elementwise work makes XLA's count 1.5-3% higher here; leaving out the merge layer would
make ours ~10% lower), and their command lines print records that add up or a one-line
error. The PyTorch peer's side of the benchmarks is tested in test_torch_peer.py."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlm_jax import models
from attnlm_jax.models import losses
from benchmarks import flops
import tiny_config


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
  ours = flops.useful_flops(config, np.asarray(lengths), train_step)
  assert 0.97 * xla <= ours < xla   # XLA's count adds the elementwise work to ours


def test_step_parts_split_the_useful_flops():
  """Without attention or merge layer, the step's useful FLOPs are the LSTM stack's and the
  softmax's, and the recurrence is half the stack's."""
  config = models.default_config()
  config.update(vocab_size=300, hidden_size=96, num_layers=2, score="none")
  work = flops.part_flops(config, 4, 7)
  assert work["whole"] == pytest.approx(work["lstm_layers"] + work["softmax"])
  assert work["recurrence"] == pytest.approx(work["lstm_layers"] / 2)


def test_epoch_benchmark_prints_an_epoch_that_adds_up():
  """The command line gives one JSON line whose JAX epoch is its parts' sum (without the
  PyTorch peer, which `test_torch_peer` runs)."""
  record = tiny_config.last_json_line(
      "benchmarks.epoch", "--config=configs/demo.py", "--config.model.hidden_size=16",
      "--steps=3", "--rounds=1", "--nopeer")
  parts = record["breakdown_seconds_per_epoch"]
  total = (parts["step_compute"] + parts["host_between_steps"] + parts["saves"]
           + parts["validation"])
  assert record["seconds_per_epoch"]["jax"] == pytest.approx(total, abs=0.3)
  assert "torch" not in record["seconds_per_epoch"]
  assert record["epoch_batches"] > record["steps"] == 3


def test_epoch_benchmark_without_config_is_a_one_line_error():
  run = subprocess.run([sys.executable, "-m", "benchmarks.epoch"], cwd=tiny_config.REPO,
                       capture_output=True, text=True)
  assert run.returncode != 0
  assert run.stderr.strip().splitlines()[-1] == (
      "error: --config is required, e.g. --config=configs/ptb.py:score=single")


def test_step_parts_prints_rates_that_follow_from_its_timings():
  record = tiny_config.last_json_line("benchmarks.step_parts", "--shape=ptb_small",
                                      "--score=single", "--vocab_size=50", "--length=4",
                                      "--repeats=1")
  assert set(record["parts"]) == {"whole", "lstm_layers", "recurrence", "softmax"}
  for part in record["parts"].values():
    assert part["gflops"] == pytest.approx(part["gflop"] / part["ms"] * 1e3, rel=0.01, abs=0.1)
  assert record["command"].startswith("python -m benchmarks.step_parts --shape=ptb_small")


def test_step_parts_unknown_score_is_a_one_line_error():
  run = subprocess.run([sys.executable, "-m", "benchmarks.step_parts", "--score=nope"],
                       cwd=tiny_config.REPO, capture_output=True, text=True)
  assert run.returncode != 0
  assert run.stderr.strip().splitlines()[-1].startswith("error: unknown score 'nope'")

