"""Token NLL, the training loss and both perplexities against hand computations."""

import math

import numpy as np
import pytest

from attnlm_jax.data.vocab import EOS_ID, PAD_ID
from attnlm_jax.models import losses


def _log_softmax(x):
  x = np.asarray(x, np.float64)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


@pytest.fixture
def batch():
  """Two rows over V=5: row 0 is one sentence "3 4 <eos>"; row 1 holds two sentences
  ("4 <eos>", "3 <eos>") then padding; a third filler row has length 0."""
  rng = np.random.default_rng(0)
  inputs = np.array([[EOS_ID, 3, 4, PAD_ID, PAD_ID],
                     [EOS_ID, 4, EOS_ID, 3, PAD_ID],
                     [PAD_ID] * 5], np.int32)
  targets = np.array([[3, 4, EOS_ID, PAD_ID, PAD_ID],
                      [4, EOS_ID, 3, EOS_ID, PAD_ID],
                      [PAD_ID] * 5], np.int32)
  lengths = np.array([3, 4, 0], np.int32)
  logits = rng.normal(size=(3, 5, 5)).astype(np.float32)
  return logits, inputs, targets, lengths


def test_nll_sums_match_hand_computation(batch):
  logits, inputs, targets, lengths = batch
  log_probs = _log_softmax(logits)
  nll = [[-log_probs[b, t, targets[b, t]] for t in range(lengths[b])] for b in range(3)]
  sums = losses.nll_sums(logits, inputs, targets, lengths)
  np.testing.assert_allclose(sums["nll"], sum(map(sum, nll)), rtol=1e-5)
  # First tokens of sentences (input <eos>): row 0 t=0, row 1 t=0 and t=2.
  after_first = nll[0][1] + nll[0][2] + nll[1][1] + nll[1][3]
  np.testing.assert_allclose(sums["nll_after_first"], after_first, rtol=1e-5)
  assert float(sums["tokens"]) == 7
  assert float(sums["sentences"]) == 3             # the three <eos> predicted, not rows


def test_loss_is_summed_nll_over_rows(batch):
  logits, inputs, targets, lengths = batch
  sums = losses.nll_sums(logits, inputs, targets, lengths)
  np.testing.assert_allclose(losses.loss(logits, targets, lengths), sums["nll"] / 3,
                             rtol=1e-6)


def test_padding_logits_do_not_matter(batch):
  logits, inputs, targets, lengths = batch
  changed = logits.copy()
  changed[0, 3:] += 100.0
  changed[2] -= 7.0
  for a, b in zip(losses.nll_sums(logits, inputs, targets, lengths).values(),
                  losses.nll_sums(changed, inputs, targets, lengths).values()):
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_perplexities():
  result = losses.perplexities({"nll": 20.0, "nll_after_first": 12.0, "tokens": 10.0})
  assert result["perplexity"] == pytest.approx(math.exp(2.0))
  assert result["perplexity_paper_convention"] == pytest.approx(math.exp(1.2))


def test_unigram_perplexity_add_one():
  # counts + 1 over V=5: [1, 1, 1, 3, 2] / 8; eval tokens 3, 4 -> exp(-(log 3/8 + log 2/8)/2).
  result = losses.unigram_perplexity(np.array([3, 3, 4]), np.array([3, 4]), 5)
  assert result == pytest.approx(math.exp(-(math.log(3 / 8) + math.log(2 / 8)) / 2))
