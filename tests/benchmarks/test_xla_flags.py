"""The XLA flag benchmark: its flag sets parse in this jaxlib, and bad names are clear errors."""

import os
import subprocess
import sys

import pytest

from attnlm_jax.common.errors import UserError
from benchmarks import xla_flags


def test_every_flag_set_is_known_to_this_jaxlib():
  # XLA aborts at start-up on a flag it does not know; all sets at once take one start-up.
  every_flag = " ".join(f for f in xla_flags.FLAG_SETS.values() if f)
  done = subprocess.run([sys.executable, "-c", "import jax.numpy as jnp; jnp.ones(2).sum()"],
                        capture_output=True, text=True, check=False,
                        env={**os.environ, "XLA_FLAGS": every_flag})
  assert done.returncode == 0, done.stderr[-500:]


def test_unknown_flag_set_names_the_valid_ones():
  with pytest.raises(UserError, match="unknown bogus; choose from default"):
    xla_flags.compare(["default", "bogus"], rounds=1)


def test_a_probe_times_the_training_and_evaluation_steps():
  seconds = xla_flags.step_seconds("ptb_small", "single", steps=1, repeats=1)
  assert set(seconds) == {"train", "eval"}
  assert all(0 < value < 60 for value in seconds.values())
