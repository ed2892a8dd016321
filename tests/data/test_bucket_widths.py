"""Bucketed training batches padded to a multiple of config.data.width_multiple."""

import ml_collections
import numpy as np
import pytest

from attnlm_jax import data as data_lib
from attnlm_jax.data import batching
from attnlm_jax.data.corpus import CorpusError

MAX_LEN = 14


def _config(directory, **overrides):
  config = dict(corpus="ptb", data_dir=str(directory), source="text", batch_size=4,
                eval_batch_size=4, max_len=MAX_LEN, bucket=True, span="sentence", seed=3)
  return ml_collections.ConfigDict({**config, **overrides})


@pytest.fixture(name="ptb_dir", scope="module")
def fixture_ptb_dir(tmp_path_factory):
  """Random sentences of 1..20 words (with <eos>, some rows longer than MAX_LEN)."""
  rng = np.random.default_rng(5)
  directory = tmp_path_factory.mktemp("ptb")
  for split in ("train", "valid", "test"):
    lines = [" ".join(f"w{w}" for w in rng.integers(0, 30, rng.integers(1, 21)))
             for _ in range(61)]
    (directory / f"ptb.{split}.txt").write_text("".join(f"{line}\n" for line in lines))
  return directory


def test_bucket_width_by_hand():
  np.testing.assert_array_equal(batching.bucket_width(np.array([1, 8, 9, 15, 17]), 8),
                                [8, 8, 16, 16, 24])
  np.testing.assert_array_equal(batching.bucket_width(np.array([30, 33, 35]), 8, max_len=35),
                                [32, 35, 35])
  assert batching.bucket_width(7, 1) == 7
  rows = np.array([[3, 5], [9, 2]])
  assert batching.pad_fraction(rows, multiple=4) == pytest.approx(1 - 19 / (2 * 8 + 2 * 12))


def test_bucketed_widths_are_multiples_and_the_rows_unchanged(ptb_dir):
  exact = list(data_lib.load(_config(ptb_dir)).train_iterator(epoch=1))
  rounded = list(data_lib.load(_config(ptb_dir, width_multiple=4)).train_iterator(epoch=1))
  assert len(exact) == len(rounded)
  for plain, wide in zip(exact, rounded):
    longest = int(plain["lengths"].max())
    assert wide["inputs"].shape[1] == min(-(-longest // 4) * 4, MAX_LEN)
    width = plain["inputs"].shape[1]
    for key in ("inputs", "targets"):
      np.testing.assert_array_equal(wide[key][:, :width], plain[key])
      assert (wide[key][:, width:] == data_lib.PAD_ID).all()
    np.testing.assert_array_equal(wide["lengths"], plain["lengths"])


def test_width_multiple_must_be_positive(ptb_dir):
  with pytest.raises(CorpusError, match="config.data.width_multiple=0 must be a positive"):
    data_lib.load(_config(ptb_dir, width_multiple=0))


@pytest.mark.parametrize("overrides", [{}, {"width_multiple": 4}, {"bucket": False}])
def test_train_widths_are_those_of_the_epochs_batches(ptb_dir, overrides):
  data = data_lib.load(_config(ptb_dir, **overrides))
  for epoch in (1, 2):
    widths = sorted({batch["inputs"].shape[1] for batch in data.train_iterator(epoch)})
    assert data.train_widths(epoch) == widths
  assert len(widths) == 1 if overrides.get("bucket") is False else len(widths) > 2
