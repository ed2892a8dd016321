"""Scoring with the batch norm on batch statistics: the running statistics give evaluation's
perplexity, the batch statistics give a score that reads the other rows and the future."""

import numpy as np
import pytest

from attnlm_jax.evaluation import batch_statistics
from attnlm_jax.evaluation import evaluate
import tiny_config


@pytest.fixture(scope="module")
def conv1x1():
  """An untrained tiny `conv1x1`: its batch norm's running statistics are still mean 0 and
  variance 1, far from any batch's own."""
  return tiny_config.untrained_model(model__score="conv1x1")


def batches(model, split="valid"):
  return list(model.data.eval_batches(split, model.config.data.eval_batch_size))


def test_running_statistics_give_evaluations_perplexities(conv1x1):
  expected = evaluate.evaluate(conv1x1, "valid")
  result = batch_statistics.perplexities(conv1x1, batches(conv1x1), "running")
  for key in ("perplexity", "perplexity_paper_convention"):
    np.testing.assert_allclose(result[key], expected[key], rtol=1e-5)


def test_batch_statistics_change_conv1x1_and_nothing_else(conv1x1):
  """The two settings differ only where a batch norm reads them."""
  single = tiny_config.untrained_model(model__score="single")
  assert (batch_statistics.perplexities(single, batches(single), "batch")
          == batch_statistics.perplexities(single, batches(single), "running"))
  running, batch = (batch_statistics.perplexities(conv1x1, batches(conv1x1), statistics)
                    for statistics in batch_statistics.STATISTICS)
  assert abs(np.log(batch["perplexity"] / running["perplexity"])) > 1e-3


def test_batch_statistics_let_a_row_read_where_the_others_end(conv1x1):
  """Under batch statistics the first row's score at step t moves when only another row ends
  before t: in a batch of sentences of one length, that tells a row where its own ends. Under
  the running statistics it does not move."""
  batch = batches(conv1x1)[0]
  step = int(batch["lengths"][1]) - 1        # The second row's last step (the first is longer).
  shorter = {**batch, "lengths": batch["lengths"].copy()}
  shorter["lengths"][1] -= 1
  for statistics, moves in (("running", False), ("batch", True)):
    before, after = (batch_statistics.token_nll(conv1x1, b, statistics)[0, step]
                     for b in (batch, shorter))
    assert (abs(after - before) > 1e-6) == moves, statistics


def test_an_unknown_statistics_name_is_refused(conv1x1):
  with pytest.raises(ValueError, match="expected one of"):
    batch_statistics.token_nll(conv1x1, batches(conv1x1)[0], "moving")
