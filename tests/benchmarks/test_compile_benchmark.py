"""benchmarks.compile: the steps compiled one by one against side by side."""

import json
import subprocess
import sys

import jax
import pytest

import tiny_config


def test_compile_benchmark_compiles_every_width_and_shape_both_ways():
  """The command line gives one JSON line: the programs of epoch 1 (one per training width
  and at least one per evaluation shape; both modes compile the same list), each mode's
  time, and the speedup, the ratio of their medians."""
  out = subprocess.run(
      [sys.executable, "-m", "benchmarks.compile", "--config=configs/demo.py",
       "--config.model.hidden_size=16", "--config.data.width_multiple=8"],
      cwd=tiny_config.REPO, capture_output=True, text=True, check=True).stdout
  record = json.loads(out.strip().splitlines()[-1])
  assert record["train_widths"] == [8, 16, 24, 32, 35]
  assert record["programs"] > len(record["train_widths"]) * jax.local_device_count()
  assert record["speedup"] == pytest.approx(
      record["one_by_one_seconds"] / record["side_by_side_seconds"], rel=2e-2)
  assert record["command"].startswith("python -m benchmarks.compile --config=configs/demo.py")
