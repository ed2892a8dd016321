"""Dropout masks (`nn.dropout_mask`): values, keep rates, independence, random bytes drawn."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnlm_jax.models import nn
from benchmarks import dropout


@pytest.mark.parametrize("rate, width", [(0.5, 1), (0.25, 1), (0.0, 1), (1 / 1024, 2),
                                         (0.2, 4), (0.65, 4)])
def test_the_fewest_bytes_that_split_exactly_at_the_rate(rate, width):
  assert nn.dropout_bytes(rate) == width


@pytest.mark.parametrize("rate", [0.5, 1 / 1024, 0.2])
def test_a_mask_keeps_each_element_with_probability_one_minus_rate(rate):
  shape = (64, 35, 650)   # 1,456,000 elements
  mask = np.asarray(nn.dropout_mask(jax.random.key(3), rate, shape))
  assert mask.shape == shape and mask.dtype == np.float32
  np.testing.assert_array_equal(np.unique(mask), [0.0, np.float32(1 / (1 - rate))])
  kept = mask > 0
  spread = 5 * np.sqrt(rate * (1 - rate) / kept.size)   # five standard deviations
  assert abs(kept.mean() - (1 - rate)) < spread
  # The bytes of one random word are independent elements: neighbours (along the last axis,
  # where a word's bytes lie) agree as often as two independent draws do.
  agree = (kept[..., 1:] == kept[..., :-1]).mean()
  assert abs(agree - ((1 - rate) ** 2 + rate ** 2)) < 5 * spread
  assert abs(np.mean(mask) - 1.0) < spread / (1 - rate)   # inverted dropout: mean 1


def test_the_same_key_gives_the_same_mask_and_another_key_another():
  draw = lambda seed: nn.dropout_mask(jax.random.key(seed), 0.5, (7, 13))
  np.testing.assert_array_equal(draw(0), draw(0))
  assert not np.array_equal(draw(0), draw(1))


def test_a_mask_reads_one_byte_per_element_at_rate_one_half():
  """At 0.5 an element keeps when its byte of the key's random words is 128 or more: a mask
  of 4n elements reads n words."""
  key = jax.random.key(11)
  words = np.asarray(jax.random.bits(key, (6,), jnp.uint32))
  expected = np.frombuffer(words.astype("<u4").tobytes(), np.uint8) >= 128
  mask = np.asarray(nn.dropout_mask(key, 0.5, (4, 6)))
  np.testing.assert_array_equal(mask > 0, expected.reshape(4, 6))


def test_dropout_benchmark_times_both_masks_of_a_batch():
  record = dropout.compare("ptb_small", batches=2, rounds=1)
  assert record["rate"] == 0.5 and record["dropout_bytes"] == 1
  assert record["elements"] == 32 * 35 * 200 * 3
  assert set(record["ms_per_batch"]) == {"project", "bernoulli"}
  assert all(value > 0 for value in record["ms_per_batch"].values())
  assert record["bernoulli_over_project"] == pytest.approx(
      record["ms_per_batch"]["bernoulli"] / record["ms_per_batch"]["project"], abs=1e-3)
  assert all(abs(rate - 0.5) < 0.01 for rate in record["keep_rate"].values())
  # Each side drew its own masks (the replaced `nn.dropout_mask` took effect).
  assert record["keep_rate"]["project"] != record["keep_rate"]["bernoulli"]
