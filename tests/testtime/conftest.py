"""Fixtures of the test-time tests: a tiny untrained `single` model, its valid states, and a
`demo` table directory with its row `none` trained."""

import pytest

from attnlm_jax.testtime import cache
from attnlm_jax.training import train
import tiny_config


@pytest.fixture(scope="module")
def model():
  return tiny_config.untrained_model(model__score="single")


@pytest.fixture(scope="module")
def valid_states(model):
  return cache.split_states(model, "valid")


@pytest.fixture(scope="module")
def table_dir(tmp_path_factory):
  """A table directory of the `demo` table with its row `none` trained (1 tiny epoch)."""
  path = tmp_path_factory.mktemp("demo_table")
  train.train_and_evaluate(tiny_config.config(model__score="none", train__num_epochs=1),
                           path / "none")
  return path
