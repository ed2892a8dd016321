"""A tiny demo config shared by the training tests: seconds per run on a CPU; and the
command-line helper of the benchmark tests."""

import json
import pathlib
import runpy
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]

# The committed results pages (docs/results/<table>/), which the tests rewrite from their files.
COMMITTED_RESULTS = REPO / "docs" / "results"

# Overrides of configs/demo.py: a 1 x 16 model, 50 batches of rows cut to 10 tokens per
# epoch, 2 epochs.
OVERRIDES = {
    "model.hidden_size": 16,
    "data.batch_size": 400,
    "data.max_len": 10,
    "data.eval_batch_size": 1000,
    "train.num_epochs": 2,
    "train.patience": 2,
    "train.save_every_steps": 20,
    "train.log_every_steps": 10,
}


def config(**overrides):
  """configs/demo.py with OVERRIDES and `overrides` ("model__score": "average" style keys)."""
  result = runpy.run_path(str(REPO / "configs" / "demo.py"))["get_config"]()
  merged = {**OVERRIDES, **{k.replace("__", "."): v for k, v in overrides.items()}}
  for key, value in merged.items():
    section, field = key.split(".")
    result[section][field] = value
  return result


def flags(**overrides) -> list[str]:
  """The same config as command-line flags for `python -m attnlm_jax.main`."""
  merged = {**OVERRIDES, **{k.replace("__", "."): v for k, v in overrides.items()}}
  return ["--config=configs/demo.py"] + [f"--config.{k}={v}" for k, v in merged.items()]


def must_not_run(*args, **kwargs):
  """A stand-in for training or evaluation where a test must use saved results only."""
  raise AssertionError(f"nothing should be trained or evaluated here: {args} {kwargs}")


def last_json_line(module: str, *args: str) -> dict:
  """The JSON object that `python -m module args`, run from the repository, prints last."""
  out = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True,
                       text=True, check=True).stdout
  return json.loads(out.strip().splitlines()[-1])
